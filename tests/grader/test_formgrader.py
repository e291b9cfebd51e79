"""grader/formgrader.py: nbgrader's Formgrader, every route kept, submission pages under a policy
(what runs in Chromium is tests/browser/test_formgrader.py)."""

from __future__ import annotations

from types import SimpleNamespace

from nbgrader.server_extensions.formgrader import handlers
from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

from grader import formgrader
from grader.sanitize import content_security_policy


def _nbgraders_routes(base_url: str) -> list[tuple]:
    added = []
    webapp = SimpleNamespace(settings={"base_url": base_url}, add_handlers=lambda host, rules: added.extend(rules))
    FormgradeExtension.init_handlers(None, webapp)
    return added


def test_every_route_of_nbgraders_formgrader_is_served_with_only_the_two_submission_handlers_replaced():
    for base_url in ("/", "/user/ada/"):
        ours, theirs = formgrader.routes(base_url), _nbgraders_routes(base_url)
        assert [r[0] for r in ours] == [r[0] for r in theirs], "nbgrader's routes changed: update grader/formgrader.py"
        swapped = [(t[1].__name__, o[1].__name__) for o, t in zip(ours, theirs, strict=True) if o[1] is not t[1]]
        assert swapped == [("SubmissionHandler", "SubmissionPage"), ("SubmissionFilesHandler", "SubmissionFiles")]
        assert all(o[2:] == t[2:] for o, t in zip(ours, theirs, strict=True))
    assert issubclass(formgrader.SubmissionPage, handlers.SubmissionHandler)


def test_a_served_page_may_run_its_templates_scripts_and_handlers_and_talk_only_to_its_server():
    template = ('<html><head><script src="/formgrader/static/js/formgrade.js?v=1"></script>'
                '<script>var a = 1;</script></head><body><span onclick="go(true);">x</span></body></html>')
    policy = content_security_policy(template, origin="http://127.0.0.1:8888")
    script_src = policy.split("script-src ", 1)[1].split(";", 1)[0].split()
    assert "http://127.0.0.1:8888/formgrader/static/js/formgrade.js" in script_src  # a file, not a folder
    assert "'unsafe-hashes'" in script_src
    assert len([s for s in script_src if s.startswith("'sha256-")]) == 2
    assert "'self'" not in script_src
    assert "'unsafe-inline'" not in script_src
    assert "connect-src 'self'" in policy
    assert "frame-ancestors 'self'" in policy
    offline = content_security_policy(template)  # a page opened from disk fetches nothing
    assert "connect-src 'none'" in offline
    assert "'self'" not in offline


def test_a_file_of_a_submission_is_served_in_a_sandbox_with_no_script():
    assert formgrader.SANDBOXED_FILE.startswith("sandbox;")
    assert "default-src 'none'" in formgrader.SANDBOXED_FILE
    assert "script" not in formgrader.SANDBOXED_FILE
