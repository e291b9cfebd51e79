"""The numbers that the lessons' prose states and that a code cell's stored output shows.

Each `Claim` ties a phrase of a markdown cell of `solutions/<lesson>/<lesson>.ipynb` to the code
cell whose stored output (stream text or text/plain) shows the number, and says how closely the
two must agree: `value` within `abs_tol` or `rel_tol` (whichever is wider), or a range
`low`..`high` that the prose gives (widened by `abs_tol`, the precision the prose states it to).
`scale` converts the printed number into the prose's unit (100 for a printed fraction that the
prose gives in percent, 1e-6 for bytes it gives in MB). tests/notebooks/test_claims.py checks
every entry against the stored outputs, so re-executing a solution whose numbers move fails there
until the prose is re-worded.

Left out: numbers that no cell computes (definitions, the papers' and the notes' figures, hand
worked examples), numbers derived from two printed ones (ratios such as "about 60-fold"), and
machine-dependent timings, unless the prose gives them as a wide range.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial


@dataclass(frozen=True)
class Claim:
    lesson: str
    name: str  # short, unique within the lesson: the test id is "<lesson>-<name>"
    prose: str  # an exact substring of one markdown cell, containing the number
    cell: str  # an exact substring of the source of one code cell
    output: str  # a regular expression whose one group is the number in that cell's stored output
    value: float | None = None
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    low: float | None = None
    high: float | None = None
    scale: float = 1.0

    def __post_init__(self):
        has_value = self.value is not None
        has_range = self.low is not None or self.high is not None
        if has_value == has_range:
            raise ValueError(f"{self.lesson} {self.name}: give a value or a range (low, high), not both")
        if has_range and (self.low is None or self.high is None or self.low > self.high):
            raise ValueError(f"{self.lesson} {self.name}: a range needs low <= high")

    @property
    def id(self) -> str:
        return f"{self.lesson}-{self.name}"

    def stated(self) -> str:
        """What the prose claims, in words, for failure messages."""
        if self.value is None:
            return f"between {self.low:g} and {self.high:g}" + (f" (± {self.abs_tol:g})" if self.abs_tol else "")
        return f"{self.value:g} (± {self.margin():g})"

    def margin(self) -> float:
        return max(self.abs_tol, self.rel_tol * abs(self.value)) if self.value is not None else self.abs_tol

    def agrees(self, stored: float) -> bool:
        if self.value is not None:
            return abs(stored - self.value) <= self.margin() * (1 + 1e-12)
        return self.low - self.abs_tol <= stored <= self.high + self.abs_tol


def parse_number(text: str) -> float:
    """A printed number: thousands separators allowed ("1,115,394"), a Unicode minus too."""
    return float(text.replace(",", "").replace("\u2212", "-"))


_01 = partial(Claim, "01_tokenization")
_02 = partial(Claim, "02_embeddings")
_03 = partial(Claim, "03_attention")
_04 = partial(Claim, "04_attention_variants")
_05 = partial(Claim, "05_positional_encodings")
_06 = partial(Claim, "06_transformer_block")
_07 = partial(Claim, "07_training")
_08 = partial(Claim, "08_kv_cache")
_09 = partial(Claim, "09_decoding")
_10 = partial(Claim, "10_your_gpt")
_11 = partial(Claim, "11_flash_attention")
_12 = partial(Claim, "12_serving")

_L01_NOTES = "(the notes: fewer than 100); 5 words take"
_L01_TABLE = "held_bytes = len(held_out.encode"
_L01_UNIGRAM = "NOTES_UNIGRAM_COUNTS['ing'] / 35"

# Lesson 00 states no number that one of its cells prints (its 88.7 and [0.269, 0.731] are
# worked by hand), so it has no entry.
CLAIMS: tuple[Claim, ...] = (
    # --- 01 tokenization
    _01("chars-per-5-words", "about 25 of them for 5 words", _L01_NOTES,
        r"5 words take (\d+) character tokens", value=25, rel_tol=0.15),
    _01("char-vocab-below-100", "For characters they give fewer than 100 tokens", _L01_NOTES,
        r"characters: V = (\d+) \(the notes", low=1, high=99),
    _01("unk-id", "into `<unk>` (id 0)", 'sample = "Romeo, my love! Romoe, my luve!"',
        r"words\s+V = [\d,]+\s+\d+ tokens: \[(?:\d+, ){5}(\d+)", value=0),
    _01("utf8-longest", "One character takes **1 to 4 bytes**", "code points per UTF-8 length",
        r"code points per UTF-8 length: \{.*, (\d+): \d+\}", value=4),
    _01("emoji-bytes", "the emoji above is four bytes", "code points per UTF-8 length",
        r"'😀': (\d+) byte", value=4),
    _01("bpe-merges", "`course_lib`'s trainer learns 768 merges", "bpe_path = bpe.save(",
        r"(?m)^merges (\d+)$", value=768),
    _01("wordpiece-u-score", "scores only $1/36$", "wordpiece_pair_scores(hug_counts)",
        r"h ##u  score ([\d.]+)", value=1 / 36, abs_tol=5e-5),
    _01("wordpiece-gs-score", r"$5/(20 \cdot 5) = 1/20$", "wordpiece_pair_scores(hug_counts)",
        r"##g ##s  score ([\d.]+)", value=1 / 20, abs_tol=5e-5),
    _01("notes-score-lo", "(l, o) = 1/2", "notes_scores = wordpiece_pair_scores(NOTES_BPE_CORPUS",
        r"\(l, o\): count \d+, score ([\d.]+)", value=0.5, abs_tol=5e-4),
    _01("notes-score-ow", "(o, w) = 1/4", "notes_scores = wordpiece_pair_scores(NOTES_BPE_CORPUS",
        r"\(o, w\): count \d+, score ([\d.]+)", value=0.25, abs_tol=5e-4),
    _01("notes-score-st", "(s, t) = 1/2", "notes_scores = wordpiece_pair_scores(NOTES_BPE_CORPUS",
        r"\(s, t\): count \d+, score ([\d.]+)", value=0.5, abs_tol=5e-4),
    _01("unigram-pieces", "23-piece BPE vocabulary", _L01_UNIGRAM,
        r"(\d+) pieces, \d+ uses", value=23),
    _01("unigram-uses", "35 uses", _L01_UNIGRAM, r"\d+ pieces, (\d+) uses", value=35),
    _01("p-ing", "`ing`, used 4 times, gets $4/35$", _L01_UNIGRAM,
        r"= \d+/35 = ([\d.]+)", value=4 / 35, abs_tol=5e-5),
    _01("volley-ball-log10", "In base 10 it is $-2.79$", _L01_UNIGRAM,
        r"volley ball\s+log10 P = (-[\d.]+)", value=-2.79, abs_tol=5e-3),
    _01("vol-le-y-ball-log10", "truncated from $-5.097$", _L01_UNIGRAM,
        r"vol le y ball\s+log10 P = (-[\d.]+)", value=-5.097, abs_tol=5e-4),
    _01("volleyball-log10", "volleyball: $-1.54$", _L01_UNIGRAM,
        r"volleyball\s+log10 P = (-[\d.]+)", value=-1.54, abs_tol=5e-3),
    _01("bos-id", "`<bos>` = 1025", "chat_tok.register_special_tokens(special_token_ids",
        r"'<bos>': (\d+)", value=1025),
    _01("pad-id", "`<pad>` = 1027", "chat_tok.register_special_tokens(special_token_ids",
        r"'<pad>': (\d+)", value=1027),
    _01("held-out-characters", "the 115,394 held-out characters", "n_held_words = len(held_out.split())",
        r"measure on the last ([\d,]+)", value=115_394),
    _01("fertility-characters", "the longest sequences, 5.5 tokens per word", _L01_TABLE,
        r"(?m)^characters\s+\d+\s+([\d.]+)", value=5.5, abs_tol=0.05),
    _01("fertility-words", "(1.33 tokens per word)", _L01_TABLE,
        r"(?m)^words\s+[\d,]+\s+([\d.]+)", value=1.33, abs_tol=5e-3),
    _01("word-vocab", "a vocabulary of 12,554 entries", _L01_TABLE,
        r"(?m)^words\s+([\d,]+)", value=12_554),
    _01("unk-one-in-22", "one token in 22 of new text", _L01_TABLE,  # 1 in 22 is 4.55%
        r"(?m)^words\s+[\d,]+\s+[\d.]+\s+[\d,]+\s+[\d.]+\s+([\d.]+)", value=100 / 22, rel_tol=0.03),
    _01("bytes-per-token-4096", "from 3.2 at 4,096", "hf_big = train_hf_bpe(train_text, V)",
        r"V =\s+4,096: ([\d.]+) characters", value=3.2, abs_tol=0.05),
    _01("bytes-per-token-16384", "to 3.8 at 16,384", "hf_big = train_hf_bpe(train_text, V)",
        r"V = 16,384: ([\d.]+) characters", value=3.8, abs_tol=0.05),
    _01("fertility-bpe-1024", "here from 2.26 tokens per word at 1,024", _L01_TABLE,
        r"BPE \(ours\) 1024\s+[\d,]+\s+([\d.]+)", value=2.26, abs_tol=5e-3),
    _01("fertility-bpe-4096", "to 1.72 at 4,096", _L01_TABLE,
        r"BPE \(ours\) 4096\s+[\d,]+\s+([\d.]+)", value=1.72, abs_tol=5e-3),
    # --- 02 embeddings
    _02("gpt2-token-table", "38.6 M of its 124 M parameters", "GPT-2 small's table:",
        r"GPT-2 small's table: ([\d,]+) parameters", value=38.6, abs_tol=0.05, scale=1e-6),
    _02("most-negative-cosine", "at about \u22120.98", "most negative cosine:",
        r"most negative cosine: (-[\d.]+)", value=-0.98, abs_tol=0.01),
    _02("cos-my-thy", "about 0.9, while", "most negative cosine:",
        r"cos\(' my', ' thy'\) = (-?[\d.]+)", value=0.9, abs_tol=0.05),
    _02("cos-he-she-negative", "have a negative one", "most negative cosine:",
        r"cos\(' he', ' she'\) = (-?[\d.]+)", low=-1, high=0),
    _02("median-ratio", "printed above is about 0.4", 'f"median ratio r {ratio.median().item():.2f}, "',
        r"median ratio r ([\d.]+)", value=0.4, abs_tol=0.05),
    _02("sinusoidal-cosine", r"\sqrt{2/3} \approx 0.82", "mean cos(token, token + PE)",
        r"mean cos\(token, token \+ PE\): ([\d.]+)", value=0.82, abs_tol=5e-3),
    _02("answer-mean-cosine", "about 0.9 in the trained model", 'f"median ratio r {ratio.median().item():.2f}, "',
        r"mean cosine ([\d.]+), 10th", value=0.9, abs_tol=0.05),
    _02("answer-sinusoidal-cosine", "about 0.82 for sinusoidal", "mean cos(token, token + PE)",
        r"mean cos\(token, token \+ PE\): ([\d.]+)", value=0.82, abs_tol=5e-3),
    _02("answer-nearest-row", "for about 80% of the pairs", 'f"median ratio r {ratio.median().item():.2f}, "',
        r"nearest row still the token: ([\d.]+)%", value=80, abs_tol=5),
    # --- 03 attention
    _03("largest-weight-64", "about 0.8 of it, of 16 keys", "raw_var, scaled_var, raw_max, scaled_max",
        r"d_h =   64: .*largest weight ([\d.]+) unscaled", value=0.8, abs_tol=0.05),
    _03("largest-weight-1024", "nearly all of it at $d_h = 1024$", "raw_var, scaled_var, raw_max, scaled_max",
        r"d_h = 1024: .*largest weight ([\d.]+) unscaled", low=0.9, high=1.0),
    _03("previous-token-head", "about half of its weight on the **previous token**",
        "How each head spends its attention",
        r"head 1: .*on the previous token ([\d.]+)", value=0.5, abs_tol=0.1),
    _03("memory-slope", "a slope of 2", "Memory of the attention weights A (float32)",
        r"fitted slope: ([\d.]+)", value=2, abs_tol=5e-3),
    _03("time-slope-fused", "between 1.9 and 2.1", "Time of one attention call",
        r"fused \(F\.scaled_dot_product_attention\): .*fitted slope ([\d.]+)", low=1.9, high=2.1),
    _03("time-slope-explicit", "between 2.0 and 2.5", "Time of one attention call",
        r"explicit \(ref\): .*fitted slope ([\d.]+)", low=2.0, high=2.5),
    # --- 04 attention variants
    _04("gpt3-kv-bytes", "= 9{,}437{,}184$ B", "gpt3 = dict(n_layer=96, head_size=128, bytes_per_value=4)",
        r"MHA\s+96\s+([\d,]+)", value=9_437_184),
    _04("gpt3-kv-mb", "about 9.4 MB per token", "gpt3 = dict(n_layer=96, head_size=128, bytes_per_value=4)",
        r"per token: ([\d.]+) MB", value=9.4, abs_tol=0.05),
    _04("fused-mask-memory", "(258 MiB at $T = 8192$)", '"dense, fused + mask": lambda',
        r"dense, fused \+ mask\s+[\d.]+\s+[\d.]+\s+[\d.]+ ms\s+([\d.]+)", value=258, abs_tol=0.5),
    _04("time-slope-explicit", "scales with slope about 2 in time", '"dense, fused + mask": lambda',
        r"dense, explicit \+ mask\s+([\d.]+)", value=2, abs_tol=0.4),
    _04("time-slope-fused", "scales with slope about 2 in time", '"dense, fused + mask": lambda',
        r"dense, fused \+ mask\s+([\d.]+)", value=2, abs_tol=0.3),
    _04("local-memory-slope", "`local_attention`'s memory grows with slope 1", '"dense, fused + mask": lambda',
        r"local_attention, c = 65\s+[\d.]+\s+([\d.]+)", value=1, abs_tol=0.05),
    _04("local-time-slope", "with slope at most about 1", '"dense, fused + mask": lambda',
        r"local_attention, c = 65\s+([\d.]+)", low=0, high=1.1),
    _04("crossover", "it was below the smallest length measured", '"dense, fused + mask": lambda',
        r"the fitted lines cross at T = (\d+)", low=0, high=512),
    _04("top-128-trained", "about 87% of the sum", "share of the top 128 singular values, per trained head",
        r"mean over heads ([\d.]+);", value=87, abs_tol=1, scale=100),
    _04("top-128-untrained", "but so does the", "share of the top 128 singular values, per trained head",
        r"untrained model ([\d.]+)", value=87, abs_tol=2, scale=100),
    _04("top-128-uniform", "the past (89%)", "share of the top 128 singular values, per trained head",
        r"uniform over the past \(no learning\): ([\d.]+)", value=89, abs_tol=1, scale=100),
    _04("top-128-previous-token", "carry about 25%", "share of the top 128 singular values, per trained head",
        r"previous token only \(a sharp head\): ([\d.]+)", value=25, abs_tol=1, scale=100),
    # --- 05 positional encodings
    _05("notes-slowest-theta", r"\approx 10^{-2}$, almost a hundred times", "notes_theta = 10000 ** (",
        r"notes, first d/2 of d\s+slowest theta = ([\d.e+-]+)", value=1e-2, rel_tol=0.25),
    _05("alibi-shallowest", "the shallowest ($m = 1/256$)", "for n_head in (8, 16, 6, 12):",
        r" 8 heads: \[.*'([\d.]+)'\]", value=1 / 256, rel_tol=1e-3),
    _05("alibi-16-steepest", "$n = 16$ gives $2^{-0.5}", "for n_head in (8, 16, 6, 12):",
        r"16 heads: \['([\d.]+)'", value=2**-0.5, abs_tol=5e-5),
    _05("rotated-values-change", "measured a change of about 4", "def rope_output(start, rotate_values):",
        r"values rotated: True .*: ([\d.]+)", value=4, abs_tol=0.5),
    _05("unrotated-values-change", "against 0)", "def rope_output(start, rotate_values):",
        r"values rotated: False .*: ([\d.]+)", value=0, abs_tol=1e-6),
    _05("t5-last-bucket", "(113 in a decoder)", "bucket_bias = t5_model.t5_bias",
        r"31\s+(\d+)\+", value=113),
    _05("answer-t5-last-bucket", "every distance from 113 on", "bucket_bias = t5_model.t5_bias",
        r"31\s+(\d+)\+", value=113),
    _05("answer-buckets-seen", "i.e. buckets 0\u201326", "bucket_bias = t5_model.t5_bias",
        r"buckets seen in training \(distances 0 \.\.\. 63\): \[(?:\d+, )*(\d+)\]", value=26),
    _05("answer-first-unseen-distance", "(distances 67 and beyond)", "bucket_bias = t5_model.t5_bias",
        r"(?m)^\s+27\s+(\d+)-", value=67),
    # --- 06 transformer block
    _06("gpt2-parameters", "GPT-2 small has 124,439,808.", "def parameters_by_part(model):",
        r"GPT-2 small: ([\d,]+) parameters", value=124_439_808),
    _06("top-1-mostly-wrong", "Most of the time the favourite is wrong", "for k in (1, 3, 5):",
        r"top 1: (\d+)%", low=0, high=50),
    _06("top-5-usually-right", "usually among the top few", "for k in (1, 3, 5):",
        r"top 5: (\d+)%", low=50, high=100),
    # --- 07 training
    _07("vocabulary", "65 of them", "'Hello' ->", r"vocabulary of (\d+):", value=65),
    _07("ln-65", r"$\ln 65 \approx 4.174$", "cpu_preset = ref.CONFIGS", r"ln 65 = ([\d.]+);",
        value=4.174, abs_tol=5e-4),
    _07("initial-loss", "its loss must be close to", "cpu_preset = ref.CONFIGS",
        r"loss at initialisation = ([\d.]+)", value=4.174, abs_tol=0.1),
    _07("initial-perplexity", "perplexity 65", "cpu_preset = ref.CONFIGS",
        r"perplexity = (\d+)", value=65, rel_tol=0.05),
    _07("live-val-loss", "to about 2.0 in 400 steps", "first, last = run.history[0], run.history[-1]",
        r"step 400: val loss ([\d.]+)", value=2.0, abs_tol=0.1),
    _07("gap-live", "about 2.0 against 1.47", 'val_windows = {"val": val_data}',
        r"live run: val loss ([\d.]+)", value=2.0, abs_tol=0.1),
    _07("gap-shipped", "about 2.0 against 1.47", 'val_windows = {"val": val_data}',
        r"shipped : val loss ([\d.]+)", value=1.47, abs_tol=5e-3),
    _07("mfu-reference", "MFU is only 5\u20137%", "h100_runs = {",  # whole percents
        r"nanogpt_shakespeare_char \(compile\).*MFU ([\d.]+)%", low=5, high=7, abs_tol=0.5),
    _07("mfu-ours", "MFU is only 5\u20137%", "h100_runs = {",
        r"shakespeare_char_gpu \(no compile\).*MFU ([\d.]+)%", low=5, high=7, abs_tol=0.5),
    _07("mfu-under-10", "under 10%", "h100_runs = {",
        r"nanogpt_shakespeare_char \(compile\).*MFU ([\d.]+)%", low=0, high=10),
    _07("answer-ln-65", r"$\ln 65 \approx 4.17$ (uniform", "cpu_preset = ref.CONFIGS",
        r"ln 65 = ([\d.]+);", value=4.17, abs_tol=5e-3),
    # --- 08 KV cache
    _08("k1-three-times", "$K_1$ has been computed three times", "def count_key_projections(",
        r"total\s+(\d+)\s+\d+\s+\d+", value=3),
    _08("k2-twice", "$K_2$ twice", "def count_key_projections(", r"total\s+\d+\s+(\d+)\s+\d+", value=2),
    _08("k3-once", "$K_3$ once", "def count_key_projections(", r"total\s+\d+\s+\d+\s+(\d+)", value=1),
    _08("cached-slope", "the fitted slope is within a few", "def step_times(model, n_steps, repeats=3):",
        r"with the cache .*\+ (-?[\d.]+) us per position", low=-5, high=5),
    _08("cache-mb", "The cache is 1.8 MB here", "per_token = kv_cache_bytes(c.n_layer",
        r"nbytes = ([\d,]+) B", value=1.8, abs_tol=0.05, scale=1e-6),
    _08("weights-mb", "the 6.2 MB of weights", "per_token = kv_cache_bytes(c.n_layer",
        r"the weights: ([\d,]+) B", value=6.2, abs_tol=0.05, scale=1e-6),
    _08("gpt3-context-gb", "it is 19.3 GB per sequence", "gpt3_token = kv_cache_bytes(",
        r"2048-token context: ([\d.]+) GB", value=19.3, abs_tol=0.05),
    _08("gpt3-weights-gb", "350 GB in float16)", "for name, n_layer, n_params, gpus in",
        r"GPT-3 175B: [\d.]+ MB per token; \d+ x 80 GB - ([\d.]+) GB", value=350, abs_tol=0.5),
    _08("gpt3-weights-gb-again", "take 350 GB in float16", "for name, n_layer, n_params, gpus in",
        r"GPT-3 175B: [\d.]+ MB per token; \d+ x 80 GB - ([\d.]+) GB", value=350, abs_tol=0.5),
    _08("bytes-gqa", "fall 2.3x with GQA", "total_mha = None",
        r"GQA\s+2\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)x", value=2.3, abs_tol=0.05),
    _08("bytes-mqa", "3.5x with MQA", "total_mha = None",
        r"MQA\s+1\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)x", value=3.5, abs_tol=0.05),
    _08("enable-gqa-gqa", "the 3x and 12x fewer bytes", "\"repeated\": lambda: F.scaled_dot_product_attention(",
        r"GQA\s+4\s+[\d.]+\s+[\d.]+\s+([\d.]+)x", low=1, high=3),
    _08("enable-gqa-mqa", "the 3x and 12x fewer bytes", "\"repeated\": lambda: F.scaled_dot_product_attention(",
        r"MQA\s+1\s+[\d.]+\s+[\d.]+\s+([\d.]+)x", low=1, high=12),
    # --- 09 decoding
    _09("65-to-the-5", r"$65^5$ is $1.2 \times 10^9$", "V, L = 40_000, 5",
        r"65\^5 = ([\d.e+]+) sequences", value=1.2e9, rel_tol=0.05),
    _09("p-s1", "0.22 = 0.00528", "S1_S2 = TableLM(", r"P\(S1\) = P\(AAAAA\) = .* = ([\d.]+)",
        value=0.00528, abs_tol=5e-6),
    _09("p-s2", "0.76 = 0.0500", "S1_S2 = TableLM(", r"P\(S2\) = P\(BBBBB\) = .* = ([\d.]+)",
        value=0.0500, abs_tol=5e-5),
    _09("exhaustive-calls", "in 781 calls", "greedy = ref.greedy_search(S1_S2, start, 5)",
        r"exhaustive search: (\d+) decoder calls", value=781),
    _09("calls-length-2", "($1 + 3 = 4$ runs)", "def random_tiny_gpt(seed", r"(?m)^ 2\s+9\s+(\d+)", value=4),
    _09("calls-length-3", "($1 + 3 + 9 = 13$ runs)", "def random_tiny_gpt(seed", r"(?m)^ 3\s+27\s+(\d+)",
        value=13),
    _09("greedy-miss-2", "about two thirds as probable", "exhaustive_best = {}",
        r"L = 2: .*its P is ([\d.]+) times", value=2 / 3, abs_tol=0.05),
    _09("greedy-miss-3", "about two thirds as probable", "exhaustive_best = {}",
        r"L = 3: .*its P is ([\d.]+) times", value=2 / 3, abs_tol=0.05),
    _09("beam-bca", r"0.1296 \approx 0.13", "NOTES_BEAM = TableLM(", r"P\(B, C, A\) = .* = ([\d.]+)",
        value=0.1296, abs_tol=5e-5),
    _09("beam-winner", "The winner is $(A, C, B)$ with 0.18", "NOTES_BEAM = TableLM(",
        r"P\(A, C, B\) = .* = ([\d.]+)", value=0.18, abs_tol=5e-5),
    _09("beam-kept-bc", "$(B, C)$ at 0.24", "NOTES_BEAM = TableLM(", r"P\(B, C\) = .* = ([\d.]+)",
        value=0.24, abs_tol=5e-5),
    _09("beam-calls-step-2", "1, 2, 2 calls", "NOTES_BEAM = TableLM(", r"time step 2: (\d+) decoder",
        value=2),
    _09("beam-calls-step-3", "1, 2, 2 calls", "NOTES_BEAM = TableLM(", r"time step 3: (\d+) decoder",
        value=2),
    _09("repeats-greedy", "on average 9% and 16%", "def repeated_windows(text, n=20):",
        r"greedy\s+.*mean (\d+)%", value=9),
    _09("repeats-beam", "on average 9% and 16%", "def repeated_windows(text, n=20):",
        r"beam, b = 4\s+.*mean (\d+)%", value=16),
    _09("repeats-greedy-most", "(up to 19% and 49% for one prompt)", "def repeated_windows(text, n=20):",
        r"greedy\s+\d+%\s+\d+%\s+(\d+)%", value=19),
    _09("repeats-beam-most", "(up to 19% and 49% for one prompt)", "def repeated_windows(text, n=20):",
        r"beam, b = 4\s+(?:\d+%\s+){4}(\d+)%", value=49),
    _09("repeats-sampled", "the sampled texts and the real continuations have none",
        "def repeated_windows(text, n=20):", r"sampling, T = 1\s+.*mean (\d+)%", value=0),
    _09("repeats-real", "the sampled texts and the real continuations have none",
        "def repeated_windows(text, n=20):", r"the validation text itself\s+.*mean (\d+)%", value=0),
    _09("top-k-second", "which gives 0.352 and 0.211", "notes_topk = torch.tensor(",
        r"after top-k \(k = 3\):\s+tensor\(\[[\d.]+, ([\d.]+),", value=0.352, abs_tol=5e-4),
    _09("top-k-third", "which gives 0.352 and 0.211", "notes_topk = torch.tensor(",
        r"after top-k \(k = 3\):\s+tensor\(\[[\d.]+, [\d.]+, ([\d.]+),", value=0.211, abs_tol=5e-4),
    _09("top-k-first", "$0.31 / 0.71 = 0.43662$", "notes_topk = torch.tensor(",
        r"0\.31 / 0\.71 = ([\d.]+)", value=0.43662, abs_tol=5e-6),
    _09("interval-first", "exactly: 0.4366", "notes_topk = torch.tensor(",
        r"after top-k \(k = 3\):\s+tensor\(\[([\d.]+),", value=0.4366, abs_tol=5e-5),
    _09("interval-second", "and 0.7887)", "boundaries = kept[:3].cumsum(dim=0)",
        r"'\[0\.437, ([\d.]+)\)'", value=0.7887, abs_tol=5e-4),
    _09("converge-w1", "converge to 0.4366, 0.3521 and 0.2113", "boundaries = kept[:3].cumsum(dim=0)",
        r"w1: .*probability ([\d.]+)", value=0.4366, abs_tol=5e-5),
    _09("converge-w2", "converge to 0.4366, 0.3521 and 0.2113", "boundaries = kept[:3].cumsum(dim=0)",
        r"w2: .*probability ([\d.]+)", value=0.3521, abs_tol=5e-5),
    _09("converge-w3", "converge to 0.4366, 0.3521 and 0.2113", "boundaries = kept[:3].cumsum(dim=0)",
        r"w3: .*probability ([\d.]+)", value=0.2113, abs_tol=5e-5),
    _09("notes-a-cumulative-4", "$+ w_4 = 0.59$", "def notes_rule_count(probs, p):",
        r"A: cumulative \[[\d.]+, [\d.]+, [\d.]+, ([\d.]+),", value=0.59, abs_tol=5e-3),
    _09("notes-rule-a", "below 0.6: $k = 4$", "def notes_rule_count(probs, p):",
        r"A: cumulative [^\n]*\n\s+p = 0\.6: the notes' rule keeps (\d+)", value=4),
    _09("standard-rule-a", "so it keeps 5", "def notes_rule_count(probs, p):",
        r"A: cumulative [^\n]*\n\s+p = 0\.6: the notes' rule keeps \d+, the standard rule (\d+)", value=5),
    _09("notes-rule-b", "keep $w_1$ alone, $k = 1$", "def notes_rule_count(probs, p):",
        r"B: cumulative [^\n]*\n\s+p = 0\.6: the notes' rule keeps (\d+)", value=1),
    _09("answer-standard-rule-b", "so $k = 1$, while", "def notes_rule_count(probs, p):",
        r"B: cumulative [^\n]*\n\s+p = 0\.6: the notes' rule keeps \d+, the standard rule (\d+)", value=1),
    _09("answer-b-rare-characters", "(Section 5 measured three of them)", "rare = top5[top5 < 0.01]",
        r"B: .*keeps (\d+) characters below 1%", value=3),
    _09("answer-a-fifth-cut", "a fifth of the probability", "rare = top5[top5 < 0.01]",
        r"A: top-5 drops ([\d.]+)", value=0.2, abs_tol=0.02),
    # --- 10 your GPT
    _10("vocabulary", "(65 tokens)", "shipped, shipped_vocab, shipped_info = load_pretrained()",
        r"vocabulary (\d+)", value=65),
    _10("ln-65", r"$\ln 65 \approx 4.17$ at its first loss", "fresh = MiniGPT(",
        r"\(ln 65 = ([\d.]+)\)", value=4.17, abs_tol=5e-3),
    _10("first-loss", "at its first loss", "fresh = MiniGPT(", r"first loss ([\d.]+)", value=4.17,
        abs_tol=0.1),
    _10("val-loss-yours", "reaches a validation loss of about 1.85", "def training_rates(",
        r"your MiniGPT \+ your train\s+([\d.]+)", value=1.85, abs_tol=0.02),
    _10("val-loss-course", "as the course's trainer does on the same config", "def training_rates(",
        r"course GPT \+ course_lib\.training\.train\s+([\d.]+)", value=1.85, abs_tol=0.02),
    _10("val-loss-nanogpt", "reached 1.90", "def training_rates(",
        r"nanogpt_shakespeare_char_cpu \(2 threads\)\s+([\d.]+)", value=1.90, abs_tol=5e-3),
    # --- 11 FlashAttention
    _11("qkv-mib-1024", "against 36 MiB per layer", "B, n_h, d_model, n_layer, bytes_per = ",
        r"(?m)^\s+1024\s+(\d+) MiB", value=36),
    _11("weights-mib-1024", "(192 MiB against", "B, n_h, d_model, n_layer, bytes_per = ",
        r"(?m)^\s+1024\s+\d+ MiB\s+([\d.]+) GiB", value=192, abs_tol=6, scale=1024),
    _11("weights-gib-16k", "one layer's take 48 GiB", "B, n_h, d_model, n_layer, bytes_per = ",
        r"(?m)^\s+16384\s+\d+ MiB\s+([\d.]+) GiB", value=48, abs_tol=5e-3),
    _11("weights-gib-16k-model", "the model's 576 GiB", "B, n_h, d_model, n_layer, bytes_per = ",
        r"(?m)^\s+16384\s+\d+ MiB\s+[\d.]+ GiB\s+([\d.]+) GiB", value=576, abs_tol=0.05),
    _11("fewer-accesses-1024", "8 times fewer accesses here", "def standard_accesses(N, d):",
        r"(?m)^\s+1024\s+[\d,]+\s+[\d,]+\s+([\d.]+)x", low=6, high=8),
    _11("fewer-accesses-16384", "8 times fewer accesses here", "def standard_accesses(N, d):",
        r"(?m)^\s+16384\s+[\d,]+\s+[\d,]+\s+([\d.]+)x", low=6, high=8),
    _11("dense-memory-slope", "(slope 2: it holds", "peak_mib, seconds = {}, {}",
        r"dense \(stores A\)\s+(?:[\d.]+\s+){5}([\d.]+)", value=2, abs_tol=0.05),
    _11("tiled-memory-slope", "grow at most linearly", "peak_mib, seconds = {}, {}",
        r"tiled, PyTorch \(blocks of 128\)\s+(?:[\d.]+\s+){5}([\d.]+)", low=0, high=1, abs_tol=0.02),
    _11("fused-memory-slope", "grow at most linearly", "peak_mib, seconds = {}, {}",
        r"F\.scaled_dot_product_attention\s+(?:[\d.]+\s+){5}([\d.]+)", low=0, high=1, abs_tol=0.02),
    _11("tiled-slope-below-1", "the tiled slope is below 1 here", "peak_mib, seconds = {}, {}",
        r"tiled, PyTorch \(blocks of 128\)\s+(?:[\d.]+\s+){5}([\d.]+)", low=0, high=1),
    _11("local-memory-slope", "`local_attention` is linear too", "peak_mib, seconds = {}, {}",
        r"local_attention, window 65\s+(?:[\d.]+\s+){5}([\d.]+)", value=1, abs_tol=0.05),
    _11("dense-peak-4096", "(a peak of 208 MiB)", "peak_mib, seconds = {}, {}",
        r"dense \(stores A\)\s+(?:[\d.]+\s+){4}([\d.]+)", value=208, abs_tol=0.5),
    # --- 12 serving
    _12("timeline-requests", "The timeline shows 24 requests", "n_requests = 8 if GRADING else 24",
        r"(\d+) requests in \d+ steps", value=24),
    _12("blocks-waste", "Blocks of 16 tokens waste at most 15 positions", "needed = sum(p + n for p, n in mix)",
        r"blocks of 16 tokens:\s+[\d,]+ \((\d+)% used\)", low=90, high=100),
    _12("speculative-did-not-pay", "In the stored run it did not pay", "# what a target pass over k + 1",
        r"speculative [\d,]+ tokens/s \(([\d.]+)x\)", low=0, high=1),
)
