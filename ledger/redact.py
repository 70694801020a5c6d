"""Secrets never get stored: allow-listed environment, and redaction of text, argv and URLs.

A receipt keeps the launch command, a log of the child's output and a few environment variables. Each of
them can carry a credential, so everything the recorder stores passes through one :class:`Redactor`,
built once from the full environment of the launch.

Rules, in order of strength:

1. The exact value of every environment variable whose *name* looks secret (:func:`looks_secret`) is
   replaced wherever it appears, when the value has at least 6 characters. This catches credentials that
   no pattern knows.
2. Known credential shapes: URL userinfo (``scheme://user:pass@host``), AWS access key ids, Hugging Face,
   GitHub, OpenAI/Anthropic (``sk-``) and Slack tokens, whole JWTs (gitleaks' rule: the signature too), W&B keys
   *in context* (bare 40-hex strings are git commit shas and stay), ``Authorization:``/``Bearer`` headers, the
   signatures of signed URLs (S3 presigned ``X-Amz-Signature``, GCS ``X-Goog-Signature``, CloudFront
   ``Signature``, Azure SAS ``sig``), PEM private-key blocks.
3. ``NAME=value``, ``NAME: value``, ``--flag value`` and Megatron's ``NAME ....... value`` where NAME or the flag
   looks secret.

What "looks secret" means for a name (a variable, a key, a flag): it is split into word parts (``_``,
``-``, ``.``, camelCase), and one part contains TOKEN (not TOKENS/TOKENIZER: counts and tokenizers), KEY,
SECRET, PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL, COOKIE or AUTH (not AUTHOR/AUTHORITY), or is PASS, PWD or
PW (but not the shell's ``PWD`` and ``OLDPWD``, exactly so named: working directories). Two exceptions
keep model hyper-parameters readable:

* attention vocabulary: KEY directly after QUERY or before VALUE (``--num-key-value-heads``,
  ``--apply-query-key-layer-scaling``) is not a credential;
* a name that ends in a descriptor word (type, policy, heads, size, dim, ...) describes a setting, not a
  secret (``--moe-token-dispatcher-type alltoall``, ``--moe-token-drop-policy probs``).

And for values: after a name whose only secret word is KEY or TOKEN, a plain number (``8``, ``0.5``,
``1e-3``, at most 6 digits) is a size, not a secret. PASSWORD/SECRET/CREDENTIAL/COOKIE/AUTH values are
always redacted, numbers included (PINs). Over-redaction is preferred to a leak: ``KEYBOARD_LAYOUT`` is
redacted, ``KMP_AFFINITY`` and ``NCCL_IB_HCA`` are not.

4. detect-secrets' regular-expression plugins (``redact_rules.json``, exported by ``python -m ledger.redact``),
   and quoted strings of high entropy (detect-secrets' base64 limit).

Long texts (log batches) run the rules only on the lines where one could match: a line holding a guard word
of a contextual rule, or the literal start of a token shape (``AKIA``, ``glpat-``, ``sk-``...; derived from
each pattern). One RE2 scan (:func:`_hot_pattern`, a DFA: linear time, no per-line Python work) finds those lines;
the others are copied as they are. Rule 1 and PEM blocks (over lines) run on the whole text.
:class:`StreamRedactor` carries an open PEM block from one batch of the output log to the next, and
:meth:`StreamRedactor.feed_bytes` does all this on bytes (the output tee).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
"""The placeholder every redacted value becomes."""
_REDACTED_BYTES = REDACTED.encode()

ALLOWED_PREFIXES = (
    "CUDA_", "NCCL_", "NVTE_", "TORCH_", "TORCHELASTIC_", "PYTORCH_", "OMP_", "SLURM_", "NVIDIA_", "CUDNN_",
    "CUBLAS_", "MKL_", "KMP_", "GLOO_", "UCX_", "NVSHMEM_", "FI_", "MEGATRON_",
)
"""Environment variables kept in the receipt, by prefix (they change how training runs)."""

ALLOWED_NAMES = frozenset({
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "GROUP_RANK", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED",
})
"""Environment variables kept in the receipt, by exact name."""

MIN_SECRET_VALUE = 6
"""Shorter values of secret-named variables are not replaced everywhere (too many false matches)."""

_DESCRIPTORS = frozenset({
    "type", "types", "dispatcher", "policy", "heads", "head", "channels", "dim", "dims", "size", "sizes",
    "count", "counts", "num", "len", "length", "limit", "budget", "ratio", "factor", "mode", "strategy",
    "format", "scaling", "parallel", "parallelism", "layers", "stride", "dropping",
})
"""A name ending in one of these describes a setting, not a secret."""

_PARTS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STRONG = re.compile(r"secret|passw(?:or)?d|passphrase|credential|cookie")
_TOKEN = re.compile(r"token(?!s|i[sz])")
_AUTHOR = re.compile(r"[a-z]*author(?:s|ity)?")
_NUMBER = re.compile(r"[+-]?(?:[0-9]{1,6}|[0-9]*\.[0-9]+(?:e[+-]?[0-9]+)?|[0-9]+e[+-]?[0-9]+)", re.IGNORECASE)


_SHELL_DIRECTORIES = frozenset({"PWD", "OLDPWD"})
"""The shell's working directories: PWD here is not a password, and taking its value for a secret would redact
the run's own directory from every path in the command and the log."""


def _secret_words(name: str) -> set[str]:
    """The kinds of secret word in a name: subset of {'strong', 'auth', 'key', 'token'}; empty: harmless."""
    if name in _SHELL_DIRECTORIES:
        return set()
    parts = [p.lower() for p in _PARTS.findall(name)]
    if parts and parts[-1] in _DESCRIPTORS:
        return set()
    found: set[str] = set()
    for i, part in enumerate(parts):
        if _STRONG.search(part) or part in ("pass", "pwd", "pw", "pword"):
            found.add("strong")
        if "auth" in part and not _AUTHOR.fullmatch(part):
            found.add("auth")
        if _TOKEN.search(part):
            found.add("token")
        if "key" in part:
            attention = part == "key" and (
                (i > 0 and parts[i - 1] == "query") or (i + 1 < len(parts) and parts[i + 1] == "value")
            )
            if not attention and part not in ("keyvalue", "querykey"):
                found.add("key")
    return found


def looks_secret(name: str) -> bool:
    """True when a variable, key or flag name suggests its value is a credential (see module docs)."""
    return bool(_secret_words(name))


def secret_value(name: str, value: str) -> bool:
    """True when ``value``, given under ``name``, must be redacted: the name looks secret, and the value is
    not a plain number under a name whose only secret words are KEY or TOKEN (sizes, counts, top-k)."""
    words = _secret_words(name)
    if not words or value == REDACTED:
        return False
    if words <= {"key", "token"} and _NUMBER.fullmatch(value.strip()):
        return False
    return True


_Sub = Callable[[re.Match[str]], str]


class _Lazy:
    """A regular expression compiled on its first use. Compiling the ~60 rules below (Python's ``re`` parses
    each in Python) took a large part of every `ledger record`'s start, while a launch's short texts reach few
    of them: a rule whose guard never occurs is never compiled. Behaves as the compiled pattern."""

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:  # two threads may both compile it: the same pattern either way
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def sub(self, repl: str | _Sub, string: str) -> str:
        return self.compiled().sub(repl, string)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.compiled(), name)


def _keep(group: int, suffix: str = "") -> _Sub:
    """A substitution that keeps group ``group``, redacts the rest of the match and appends ``suffix``."""
    return lambda m: m.group(group) + REDACTED + suffix


def _name_value(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    if not secret_value(name, value):
        return m.group(0)
    return m.group(0)[: m.start("value") - m.start(0)] + REDACTED


_CONTEXT_WORDS = ("token", "key", "secret", "pass", "pwd", "credential", "cookie", "auth", "bearer", "wandb")
"""Every contextual rule below needs one of these words (in any case): a line without any, as most log lines
are, skips those rules."""

_Rule = tuple[_Lazy, "str | _Sub", tuple[str, ...] | None]
"""(pattern, replacement, guards): the rule runs only where one of the guards occurs (lower-case guards are
looked for in the lower-cased text, others as they are); None: always, over the whole text."""

_PEM = _Lazy(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END (?P=kind)-----|\Z)"
    r"|---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----.*?(?:---- END SSH2 ENCRYPTED PRIVATE KEY ----|\Z)", re.S)
"""A PEM private key block, up to the END line of its own kind (another stream's block printed in the middle
of this one does not end it) or the end of the text."""

_WHOLE: tuple[_Rule, ...] = (
    # PEM private keys (whole block, over lines; an unterminated block is cut at the end of the text)
    (_PEM, REDACTED, ("-----begin ", "---- begin ")),
    # credentials in URLs: keep the scheme, drop user[:password]
    (_Lazy(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^\s/?#@'\"<>]+@)+"), _keep(1, "@"), ("://",)),
    # shapes detect-secrets has no plugin for: AWS ids, Hugging Face, GitHub fine-grained PATs, OpenAI/Anthropic
    # `sk-`, Slack, Google API keys (each starts with a literal: the regex engine finds it fast in any text)
    *((_Lazy(p), REDACTED, None) for p in (
        r"AKIA[0-9A-Z]{16}\b", r"ASIA[0-9A-Z]{16}\b", r"hf_[A-Za-z0-9]{30,}", r"gh[pousr]_[A-Za-z0-9]{30,}",
        r"github_pat_[A-Za-z0-9_]{22,}", r"sk-[A-Za-z0-9_-]{20,}", r"xox[abprs]-[A-Za-z0-9-]{10,}",
        r"AIza[0-9A-Za-z_-]{35}",
        # a whole JWT, signature included: gitleaks' `jwt` rule (header and payload base64url JSON, `eyJ...`,
        # then the signature). detect-secrets' JwtTokenDetector ends lazily after the payload: its match left the
        # signature in place wherever no "token" word was near.
        r"eyJ[A-Za-z0-9_-]{10,}={0,2}\.eyJ?[A-Za-z0-9_-]{10,}={0,2}\.[A-Za-z0-9_-]{10,}={0,2}")),
)

_LINE: tuple[_Rule, ...] = (
    # Authorization headers, keeping the scheme word; then any remaining `Bearer xyz`
    (_Lazy(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?)"
                r"[^\s\"',;]+"), _keep(1), ("auth",)),
    (_Lazy(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), _keep(1), ("bearer",)),
    # W&B keys only in context: a bare 40-hex string is usually a git sha
    (_Lazy(r"(?i)(\bwandb\s+login\b[^\n]*?)\b[0-9a-f]{40}\b"), _keep(1), ("wandb",)),
    # mysql -pSECRET (the password glued to -p), curl -u user:SECRET / --user user:SECRET
    (_Lazy(r"(\bmysql\w*\b[^\n]*?\s-p)(?!\s)[^\s\"']+"), _keep(1), ("mysql",)),
    (_Lazy(r"((?:\s|^)(?:-u\s*|--user[\s=]+)[\"']?[^\s:\"']*:)[^\s\"']+"), _keep(1), (" -u", "-u ", "--user")),
    # --flag value / --flag=value in free text, and '--flag', 'value' in a printed list
    (_Lazy(r"(?P<name>(?<![\w-])--?[A-Za-z][\w.-]*)(?:=|\s+|[\"']?\s*,\s*[\"']?)"
                r"(?P<value>(?!-)[^\s\"',;&(){}\[\]]+)"), _name_value, _CONTEXT_WORDS),
    # NAME=value, NAME: value, "name": "value"
    (_Lazy(r"(?P<name>\b[A-Za-z_][\w.-]*)[\"']?(?:\s*=\s*|\s*:\s+|:)[\"']?"
                r"(?!(?i:bearer|basic|digest|token)\s|//)(?P<value>(?!-)[^\s\"',;&(){}\[\]]+)"),
     _name_value, _CONTEXT_WORDS),
    # Megatron's argument dump: `  wandb_api_key ..................... <value>` (name, dots, value)
    (_Lazy(r"(?P<name>\b[A-Za-z_][\w-]*)[ \t]+\.{2,}[ \t]+(?P<value>[^\s\"',;&(){}\[\]]+)"), _name_value,
     _CONTEXT_WORDS),
    # the signature of a signed URL, in its query string: S3 presigned (X-Amz-Signature, SigV4), GCS signed
    # (X-Goog-Signature), CloudFront (Signature) and Azure SAS (sig; Microsoft's security-utilities rule
    # SEC101/051 LooseSasSecret names the same parameter). The URL stays readable, its signature does not.
    (_Lazy(r"(?i)((?:[?&;]|\b)(?:x-amz-signature|x-goog-signature|signature|sig)=)[^&\s\"'<>;#]+"), _keep(1),
     ("signature=", "sig=")),
    # high-entropy quoted strings (detect-secrets' Base64HighEntropyString: charset and limit)
    (_Lazy(r"([\"'])([A-Za-z0-9+/=_-]{20,})\1"), lambda m: _entropic(m, 2), ('"', "'")),
)
_NOT_HOT = ('"', "'")
"""Guards that do not make a line of a long text hot on their own (quotes are everywhere in JSON logs): the
entropy rule runs on short texts and on lines already hot for another reason."""
_NOT_SECRET_WORDS = {"token": ("tokens", "tokeniz", "tokenis")}
"""Occurrences of a guard word that do not make a line hot (token counts and tokenizers, as in looks_secret)."""

SMALL_TEXT = 4096
"""Texts up to this length go through every rule; longer ones (log batches) only through the lines where a
rule's guard occurs, so that plain log lines cost a few substring searches per megabyte."""

RULES_FILE = Path(__file__).with_name("redact_rules.json")
"""detect-secrets' regular-expression plugins, exported by ``python -m ledger.redact`` (importing
detect-secrets itself takes about 0.4 s, which every `ledger record` would pay; a test checks the export
against the installed detect-secrets)."""

RULE_GUARDS: dict[str, list[list[str] | None]] = {
    # plugin class -> per pattern: the literal strings one of which every match contains (lower case: looked
    # for case-insensitively), or None for patterns with a literal prefix (fast over any text by themselves)
    "AWSKeyDetector": [["A3T", "ABIA", "ACCA", "AKIA", "ASIA"], ["aws"]],
    "ArtifactoryDetector": [["AKC"], ["AP"]],
    "AzureStorageKeyDetector": [None],
    "BasicAuthDetector": [["://"]],
    "CloudantDetector": [["key", "pwd", "pw", "pass", "token"], ["key", "pwd", "pw", "pass", "token"],
                         ["cloudant"], ["cloudant"]],
    "DiscordBotTokenDetector": [["discord", "bot"]],
    "GitHubTokenDetector": [None],
    "GitLabTokenDetector": [None, None, None, None, None, None, None],
    "IbmCosHmacDetector": [["key"]],
    "IbmCloudIamDetector": [["key", "pwd", "pass", "token"]],
    "JwtTokenDetector": [["eyJ"]],
    "MailchimpDetector": [["-us"]],
    "NpmDetector": [None],
    "OpenAIDetector": [None],
    "PypiTokenDetector": [None, None],
    "SendGridDetector": [None],
    "SlackDetector": [["xox"], ["hooks.slack.com"]],
    "SoftlayerDetector": [["key", "pwd", "pass", "token"], ["softlayer"]],
    "SquareOAuthDetector": [None],
    "StripeDetector": [["k_live_"]],
    "TelegramBotTokenDetector": [["telegram", "bot"]],
    "TwilioKeyDetector": [None, None],
}
"""The plugins used. Left out: PrivateKeyDetector (it flags the BEGIN line; the PEM rule above removes the
whole block) and IPPublicDetector (an address is not a credential: MASTER_ADDR must stay readable)."""

ENTROPY_LIMIT = 4.5
"""detect-secrets' Base64HighEntropyString limit (bits per character). Hex strings are not judged by entropy:
they are commit shas and digests; hex credentials are caught by name or by shape."""
_ENTROPY_CHARSET = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/\\-_=")


def shannon_entropy(data: str) -> float:
    """Bits per character of ``data`` over the base64 charset (detect-secrets' formula)."""
    if not data:
        return 0.0
    n = len(data)
    return -sum(c / n * math.log2(c / n) for ch, c in Counter(data).items() if ch in _ENTROPY_CHARSET)


def high_entropy(token: str) -> bool:
    """True for a random-looking token: at least 20 base64 characters, letters and digits, above
    :data:`ENTROPY_LIMIT`."""
    return (len(token) >= 20 and any(c.isdigit() for c in token) and any(c.isalpha() for c in token)
            and shannon_entropy(token) > ENTROPY_LIMIT)


def _entropic(m: re.Match[str], group: int) -> str:
    if not high_entropy(m.group(group)):
        return m.group(0)
    return m.group(0)[: m.start(group) - m.start(0)] + REDACTED + m.group(0)[m.end(group) - m.start(0):]


def _plugin_sub(m: re.Match[str]) -> str:
    """A detect-secrets match: the secret is its first group when that group is long (the keyword
    patterns), else the whole match (token shapes whose first group is a prefix such as ``ghp``)."""
    g = m.group(1) if m.re.groups else None
    if g is not None and len(g) >= 16:
        return m.group(0)[: m.start(1) - m.start(0)] + REDACTED + m.group(0)[m.end(1) - m.start(0):]
    return REDACTED


def export_rules() -> list[dict[str, Any]]:
    """detect-secrets' regular-expression plugins as data (pattern, flags, guards), for :data:`RULES_FILE`."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    out = []
    mapping: dict[str, Any] = dict(get_mapping_from_secret_type_to_class())
    plugins: list[Any] = [mapping[k] for k in sorted(mapping)]
    for cls in plugins:
        if cls.__name__ not in RULE_GUARDS:
            continue
        for pattern, guards in zip(cls().denylist, RULE_GUARDS[cls.__name__], strict=True):
            out.append({"plugin": cls.__name__, "pattern": pattern.pattern, "flags": int(pattern.flags),
                        "guards": guards})
    return out


def _load_rules() -> tuple[tuple[_Rule, ...], tuple[_Rule, ...]]:
    whole: list[_Rule] = []
    line: list[_Rule] = []
    for item in json.loads(RULES_FILE.read_text()):
        rule = (_Lazy(item["pattern"], item["flags"]), _plugin_sub, None)
        if item["guards"] is None:
            whole.append(rule)
        else:
            line.append((rule[0], rule[1], tuple(item["guards"])))
    return tuple(whole), tuple(line)


def _one_pass(rules: tuple[_Rule, ...]) -> _Rule:
    """Unguarded token-shape rules as one alternation: one scan of a long text instead of one per rule
    (each match is redacted whole)."""
    parts = []
    for pattern, _, _ in rules:
        body = re.sub(r"\((?!\?)", "(?:", pattern.pattern)  # no capturing groups
        parts.append(f"(?i:{body})" if pattern.flags & re.IGNORECASE else f"(?:{body})")
    return _Lazy("|".join(parts)), REDACTED, None


def literal_starts(pattern: re.Pattern[str] | _Lazy) -> list[str] | None:
    """The literal strings one of which starts every match of ``pattern`` (``(ghp|gho)_x`` -> ``ghp_``,
    ``gho_``), from its parse tree; None when some match may start otherwise (or the set is too large)."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    def expand(items: Any) -> tuple[list[str], bool]:
        out = [""]
        for op, av in items:
            if op is c.LITERAL:
                out = [p + chr(av) for p in out]
                continue
            if op is c.IN and av and all(o is c.LITERAL for o, _ in av):
                alts = [[(c.LITERAL, v)] for _, v in av]
            elif op is c.BRANCH:
                alts = av[1]
            elif op is c.SUBPATTERN and not av[1] and not av[2]:
                alts = [av[3]]
            else:
                return out, False
            subs = [expand(list(a)) for a in alts]
            out = [p + q for p in out for q, _ in ((x, y) for xs, y in subs for x in xs)]
            if len(out) > 64:
                return [], False
            if not all(whole for _, whole in subs):
                return out, False
        return out, True

    starts, _ = expand(list(_parser.parse(pattern.pattern, pattern.flags)))
    return None if not starts or any(len(x) < 2 for x in starts) else sorted(set(starts))


_PLUGIN_WHOLE, _PLUGIN_LINE = _load_rules()
_ALL_WHOLE = _WHOLE[:2] + (_one_pass(_WHOLE[2:] + _PLUGIN_WHOLE),)
_ALL_LINE = _LINE + _PLUGIN_LINE
_GUARDS = {g for _, _, guards in _ALL_LINE for g in guards or ()} - set(_NOT_HOT)
_LINE_GUARDS = sorted(g for g in _GUARDS if not any(o != g and o in g and o not in _NOT_SECRET_WORDS for o in _GUARDS))
"""Every guard of a line rule, less those that contain a shorter one (``pwd`` is found by ``pw``)."""


@functools.cache
def _shape_starts() -> list[list[str] | None]:
    """:func:`literal_starts` of each token shape (parsed on the first long text, not at import)."""
    return [literal_starts(p) for p, _, _ in _WHOLE[2:] + _PLUGIN_WHOLE]


@functools.cache
def _long_rules() -> tuple[tuple[_Rule, ...], tuple[_Rule, ...], Any]:
    """(anywhere, hot rules, hot pattern) for long texts, made on the first one:

    - anywhere: token shapes without a literal start (none today): they run over the whole of a long text;
    - hot rules: what runs on a hot line of a long text: URL userinfo, the token shapes, the contextual rules;
    - the hot pattern: :func:`_hot_pattern`."""
    anywhere = tuple(r for r, starts in zip(_WHOLE[2:] + _PLUGIN_WHOLE, _shape_starts(), strict=True)
                     if starts is None)
    hot_rules = (_WHOLE[1], _one_pass(tuple(r for r in _WHOLE[2:] + _PLUGIN_WHOLE if r not in anywhere)), *_ALL_LINE)
    return anywhere, hot_rules, _hot_pattern()

_PEM_STARTS = ("-----BEGIN ", "---- BEGIN ")
_PEM_MARKS = tuple(start.encode() for start in _PEM_STARTS)
"""Where a PEM block may start (:data:`_PEM` is case-sensitive)."""


def _pem_mark(data: bytes) -> bool:
    """Whether ``data`` holds one of :data:`_PEM_MARKS`: one RE2 scan for both (a literal search, several times
    faster than Python's ``in`` over a long text)."""
    return _pem_marks().search(data) is not None


@functools.cache
def _pem_marks() -> Any:
    import re2

    return re2.compile(b"|".join(re.escape(mark) for mark in _PEM_MARKS))


def _hot_pattern() -> Any:
    """One RE2 pattern (bytes, Latin-1) matching each whole line where a hot rule (:func:`_long_rules`) may match:
    a guard of a line rule (lower-case guards in any case; ``token`` not as in ``tokens``, ``tokenizer``:
    :data:`_NOT_SECRET_WORDS`), ``://``, or a literal start of a token shape (in its pattern's case)."""
    import re2

    sensitive: set[str] = {g for g in _LINE_GUARDS if g != g.lower()}
    insensitive: set[str] = {g for g in _LINE_GUARDS if g == g.lower()} | {"://"}
    for (pattern, _, _), starts in zip(_WHOLE[2:] + _PLUGIN_WHOLE, _shape_starts(), strict=True):
        for start in starts or ():
            (insensitive if pattern.flags & re.IGNORECASE else sensitive).add(start.lower()
                                                                            if pattern.flags & re.IGNORECASE
                                                                            else start)
    lower = []
    for g in sorted(insensitive):
        skip = _NOT_SECRET_WORDS.get(g)
        if skip is None:
            lower.append(re.escape(g))
        else:  # token(?!s|i[sz]), without look-ahead (RE2 has none)
            assert skip == ("tokens", "tokeniz", "tokenis") and g == "token"
            lower.append(r"token(?:$|[^si]|i(?:$|[^sz]))")
    alternatives = [re.escape(g) for g in sorted(sensitive)] + [f"(?i:{'|'.join(lower)})"]
    return re2.compile(f"(?m)^.*(?:{'|'.join(alternatives)}).*$".encode("latin-1"))



def _hit(guards: tuple[str, ...] | None, s: str, lower: str) -> bool:
    """A guard with an upper-case letter is looked for as it is, any other in the lower-cased text."""
    return guards is None or any(g in (s if g != g.lower() else lower) for g in guards)


def _apply(rules: tuple[_Rule, ...], s: str) -> str:
    lower = s.lower()
    for pattern, replacement, guards in rules:
        if _hit(guards, s, lower):
            s = pattern.sub(replacement, s)
            lower = s.lower()
    return s


def redact_json(data: Any, text: Callable[[str], str]) -> Any:
    """A decoded JSON document with every string passed through ``text`` and every value under a
    secret-looking key (:func:`secret_value`) replaced by :data:`REDACTED` (``{"seed_secret": 1234}``)."""
    if isinstance(data, str):
        return text(data)
    if isinstance(data, list):
        return [redact_json(v, text) for v in data]
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            key = text(str(k))
            scalar = v if isinstance(v, str) else json.dumps(v)
            out[key] = REDACTED if v is not None and secret_value(str(k), scalar) else redact_json(v, text)
        return out
    return data


_ENTROPY_TOKEN = re.compile(r"[A-Za-z0-9+=_][A-Za-z0-9+/=_]{19,}")
"""A token judged by entropy: one word of base64 characters (not a path; no ``-`` or ``.``, which join the
words of run names such as ``dsv3-671b-1024xH100-mtp-fp8-blockwise``)."""
_FLAG = re.compile(r"--?[A-Za-z][\w.-]+")
_FLAG_EQ = re.compile(r"(--?[A-Za-z][\w.-]+)=(.*)", re.S)
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@")


class Redactor:
    """Redacts secrets from the environment, free text, argv and URLs, for one launch environment.

    ``extra_env`` adds names to the environment allow-list (``NAME`` exactly, or ``PREFIX*``).
    """

    def __init__(self, env: Mapping[str, str], extra_env: Sequence[str] = ()) -> None:
        self._env = dict(env)
        self._extra_names = frozenset(n for n in extra_env if not n.endswith("*"))
        self._extra_prefixes = tuple(n[:-1] for n in extra_env if n.endswith("*"))
        self._secrets = {v for k, v in self._env.items() if len(v) >= MIN_SECRET_VALUE and looks_secret(k)}
        self._ordered: list[str] = []
        self._compile()

    def _compile(self) -> None:
        self._ordered = sorted(self._secrets, key=len, reverse=True)
        self._ordered_bytes = [v.encode("utf-8", "surrogatepass") for v in self._ordered]

    def learn(self, value: str) -> None:
        """Treat ``value`` as a secret from now on: :meth:`text` replaces it wherever it appears (when it
        has at least 6 characters)."""
        if len(value) >= MIN_SECRET_VALUE and value not in self._secrets:
            self._secrets.add(value)
            self._compile()

    def allowed(self, name: str) -> bool:
        """True when the variable ``name`` belongs in the receipt."""
        return (
            name in ALLOWED_NAMES
            or name in self._extra_names
            or name.startswith(ALLOWED_PREFIXES)
            or (bool(self._extra_prefixes) and name.startswith(self._extra_prefixes))
        )

    def environment(self) -> dict[str, str]:
        """The allow-listed variables, sorted by name; a secret name or a secret-looking value gives
        :data:`REDACTED` as the whole value."""
        kept: dict[str, str] = {}
        for name in sorted(self._env):
            if not self.allowed(name):
                continue
            value = self._env[name]
            kept[name] = REDACTED if (looks_secret(name) or self.text(value) != value) and value else value
        return kept

    def text(self, s: str) -> str:
        """``s`` with every secret-looking substring replaced by :data:`REDACTED` (multi-line blocks
        included: a PEM key printed in one write goes as a whole)."""
        if len(s) > SMALL_TEXT:
            return self._long(s.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")
        for value in self._ordered:
            if value in s:
                s = s.replace(value, REDACTED)
        return _apply(_ALL_LINE, _apply(_ALL_WHOLE, s))

    def text_bytes(self, data: bytes) -> bytes:
        """:meth:`text` of UTF-8 bytes (invalid sequences become U+FFFD), without decoding the lines where
        nothing can match."""
        if not data.isascii():
            data = data.decode("utf-8", "replace").encode("utf-8")
        if len(data) <= SMALL_TEXT:
            return self.text(data.decode("utf-8")).encode("utf-8")
        return self._long(data)

    def _long(self, data: bytes) -> bytes:
        """A long text as UTF-8 (surrogates passed through): secret values and PEM blocks over the whole
        text, the other rules on the hot lines only (see the module docs)."""
        for value in self._ordered_bytes:
            if value in data:
                data = data.replace(value, _REDACTED_BYTES)
        if _pem_mark(data):
            data = _PEM.sub(REDACTED, data.decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")
        anywhere, hot_rules, hot_lines = _long_rules()
        if anywhere:
            data = _apply(anywhere, data.decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")
        pieces, last = [], 0
        for m in hot_lines.finditer(data):
            start, end = m.span()
            hot = _apply(hot_rules, data[start:end].decode("utf-8", "surrogatepass"))
            pieces += [data[last:start], hot.encode("utf-8", "surrogatepass")]
            last = end
        if not pieces:
            return data
        pieces.append(data[last:])
        return b"".join(pieces)

    def label(self, value: str) -> str:
        """A run's name or a tag value: :meth:`text`, and a random-looking token is a secret whatever its
        shape (:func:`high_entropy`)."""
        token = value.strip()
        return REDACTED if _ENTROPY_TOKEN.fullmatch(token) and high_entropy(token) else self.text(value)

    def tags(self, tags: Mapping[str, str]) -> dict[str, str]:
        """Tags with the values of secret-named keys and secret-looking values redacted."""
        return {self.text(k): REDACTED if secret_value(k, v) else self.label(v) for k, v in tags.items()}

    def json(self, data: Any) -> Any:
        """A JSON document (workload, config, SDK facts): see :func:`redact_json`."""
        return redact_json(data, self.text)

    def argv(self, args: Sequence[str]) -> list[str]:
        """A command with the values of secret flags redacted (``--flag value`` and ``--flag=value``), then
        :meth:`text` applied to every argument. A secret flag followed by another option is a switch
        (``--use-auth-token --bf16``): nothing is consumed. Each value redacted here is :meth:`learn`-ed, so
        the training output that echoes its own arguments is redacted too."""
        out: list[str] = []
        pending: str | None = None
        mysql = bool(args) and Path(args[0]).name.startswith("mysql")
        for arg in args:
            if pending is not None:
                flag, pending = pending, None
                if flag in ("-u", "--user"):  # curl -u user:password
                    user, colon, password = arg.partition(":")
                    out.append(f"{self.text(user)}:{self._secret(password)}" if colon and password else self.text(arg))
                    continue
                if not arg.startswith("-") or _NUMBER.fullmatch(arg):
                    out.append(self._secret(arg) if secret_value(flag, arg) else self.text(arg))
                    continue
            eq = _FLAG_EQ.fullmatch(arg)
            if mysql and len(arg) > 2 and arg.startswith("-p") and not arg.startswith("--"):
                out.append("-p" + self._secret(arg[2:]))
            elif eq and secret_value(eq.group(1), eq.group(2)):
                out.append(f"{eq.group(1)}={self._secret(eq.group(2))}")
            elif arg in ("-u", "--user") or (not eq and _FLAG.fullmatch(arg) and looks_secret(arg)):
                pending = arg
                out.append(arg)
            elif _ENTROPY_TOKEN.fullmatch(eq.group(2) if eq else arg) and high_entropy(eq.group(2) if eq else arg):
                out.append(f"{eq.group(1)}={self._secret(eq.group(2))}" if eq else self._secret(arg))
            else:
                out.append(self.text(arg))
        return out

    def _secret(self, value: str) -> str:
        self.learn(value)
        return REDACTED

    def url(self, u: str) -> str:
        """A URL with its userinfo removed entirely, then :meth:`text` (query-string tokens).
        scp-like git remotes (``git@host:org/repo.git``) have no scheme and stay as they are."""
        return self.text(_USERINFO.sub(r"\1", u))


class StreamRedactor:
    """Redacts a stream handed over in batches of whole lines (the output log): :meth:`Redactor.text` per
    batch, and a PEM key block that a batch leaves open is redacted in the next ones up to its END line.

    The log interleaves stdout and stderr line by line, so another stream's lines (even a whole key block of
    another kind) may land inside an open block: while a block is open, its body lines (base64, armour
    headers, blank) are redacted, any other line is redacted as usual and does not close it; the END line of
    the block's own kind does. A block never ended closes after :data:`MAX_BLOCK_LINES` lines, so that an
    unterminated key cannot swallow the rest of a log."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.open: dict[str, int] = {}
        """Kind of each open block (``RSA PRIVATE KEY``, ``SSH2``) -> lines seen since its BEGIN."""

    @property
    def open_block(self) -> bool:
        return bool(self.open)

    def feed_bytes(self, batch: bytes) -> bytes:
        """:meth:`feed` of UTF-8 bytes (what the tee hands over); invalid sequences become U+FFFD."""
        if self.open or _pem_mark(batch):
            return self.feed(batch.decode("utf-8", "replace")).encode("utf-8", "surrogatepass")
        return self.redactor.text_bytes(batch)

    def feed(self, batch: str) -> str:
        """One batch of whole lines, redacted."""
        if not self.open and not any(start in batch for start in _PEM_STARTS):
            return self.redactor.text(batch)
        out: list[str] = []
        plain: list[str] = []  # consecutive lines outside any block, redacted together

        def flush() -> None:
            if any(plain):
                out.append(self.redactor.text("".join(plain)))
                plain.clear()

        def hide() -> None:  # one REDACTED line for a run of hidden lines
            flush()
            if not out or out[-1] != _HIDDEN:
                out.append(_HIDDEN)

        for line in batch.splitlines(keepends=True):
            for kind in self.open:
                self.open[kind] += 1
            end = _BLOCK_END.search(line)
            if end is not None and _kind(end) in self.open:
                del self.open[_kind(end)]
                hide()
                rest = line[end.end():]
                if rest.strip():
                    plain.append(rest)
                continue
            self.open = {k: n for k, n in self.open.items() if n <= MAX_BLOCK_LINES}
            if self.open and _BLOCK_LINE.fullmatch(line):
                hide()
                continue
            begin = _BLOCK_BEGIN.search(line)
            if begin is not None and not _ends(line, begin):
                plain.append(line[:begin.start()])
                self.open[_kind(begin)] = 0
                hide()
                continue
            plain.append(line)
        flush()
        return "".join(out)


MAX_BLOCK_LINES = 400
"""Lines after which a PEM block that never printed its END line is taken as ended (a 16384-bit RSA key is
about 200 lines of base64)."""
_HIDDEN = REDACTED + "\n"
_BLOCK_BEGIN = re.compile(r"-----BEGIN (?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
                          r"|---- BEGIN (?P<ssh2>SSH2) ENCRYPTED PRIVATE KEY ----")
_BLOCK_END = re.compile(r"-----END (?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
                        r"|---- END (?P<ssh2>SSH2) ENCRYPTED PRIVATE KEY ----")
_BLOCK_LINE = re.compile(r"[A-Za-z0-9+/=]*\r?\n?|[\w-]+: [^\n]*\n?")
"""A line of a PEM block's body: base64 (the PGP checksum ``=abcd`` included), blank, or an armour header."""


def _kind(m: re.Match[str]) -> str:
    return m.group("kind") or m.group("ssh2")


def _ends(line: str, begin: re.Match[str]) -> bool:
    """Whether the block begun at ``begin`` ends on the same line (a key printed with escaped newlines)."""
    return any(_kind(e) == _kind(begin) for e in _BLOCK_END.finditer(line, begin.end()))


def _main() -> None:
    """``python -m ledger.redact``: export detect-secrets' plugins into :data:`RULES_FILE`."""
    RULES_FILE.write_text(json.dumps(export_rules(), indent=1) + "\n")
    print(f"wrote {RULES_FILE}")


__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "REDACTED", "Redactor", "StreamRedactor", "looks_secret",
           "redact_json", "secret_value"]

if __name__ == "__main__":
    _main()
