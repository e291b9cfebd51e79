"""grader/feedback.py: the feedback pages' policy."""

from __future__ import annotations

from pathlib import Path

from grader.sanitize import (
    add_content_security_policy,
)

ROOT = Path(__file__).resolve().parents[2]


def test_feedback_pages_allow_only_the_templates_own_scripts():
    from grader.feedback import feedback_policy

    policy = feedback_policy(ROOT)
    assert "default-src 'none'" in policy
    assert "object-src 'none'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0], policy
    page = add_content_security_policy("<html><head><title>t</title></head><body></body></html>", policy)
    assert page.index("Content-Security-Policy") < page.index("<title>")
