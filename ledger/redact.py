"""Secrets never get stored: allow-listed environment, and redaction of text, argv and URLs.

A receipt keeps the launch command, a log of the child's output and a few environment variables. Each of
them can carry a credential, so everything the recorder stores passes through one :class:`Redactor`,
built once from the full environment of the launch.

Rules, in order of strength:

1. The exact value of every environment variable whose *name* looks secret (:func:`looks_secret`) is
   replaced wherever it appears, when the value has at least 6 characters. This catches credentials that
   no pattern knows.
2. Known credential shapes: URL userinfo (``scheme://user:pass@host``), AWS access key ids, Hugging Face,
   GitHub, OpenAI/Anthropic (``sk-``) and Slack tokens, W&B keys *in context* (bare 40-hex strings are git
   commit shas and stay), ``Authorization:``/``Bearer`` headers, PEM private-key blocks.
3. ``NAME=value``, ``NAME: value`` and ``--flag value`` where NAME or the flag looks secret.

What "looks secret" means for a name (a variable, a key, a flag): it is split into word parts (``_``,
``-``, ``.``, camelCase), and one part contains TOKEN (not TOKENS/TOKENIZER: counts and tokenizers), KEY,
SECRET, PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL, COOKIE or AUTH (not AUTHOR/AUTHORITY). Two exceptions
keep model hyper-parameters readable:

* attention vocabulary: KEY directly after QUERY or before VALUE (``--num-key-value-heads``,
  ``--apply-query-key-layer-scaling``) is not a credential;
* a name that ends in a descriptor word (type, policy, heads, size, dim, ...) describes a setting, not a
  secret (``--moe-token-dispatcher-type alltoall``, ``--moe-token-drop-policy probs``).

And for values: after a name whose only secret word is KEY or TOKEN, a plain number (``8``, ``0.5``,
``1e-3``, at most 6 digits) is a size, not a secret. PASSWORD/SECRET/CREDENTIAL/COOKIE/AUTH values are
always redacted, numbers included (PINs). Over-redaction is preferred to a leak: ``KEYBOARD_LAYOUT`` is
redacted, ``KMP_AFFINITY`` and ``NCCL_IB_HCA`` are not.

Limit: :meth:`Redactor.text` is stateless, so a PEM block split over several calls (one log line at a
time) only has its BEGIN line recognised; the key body lines are not secret-shaped on their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

REDACTED = "<redacted>"
"""The placeholder every redacted value becomes."""

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


def _secret_words(name: str) -> set[str]:
    """The kinds of secret word in a name: subset of {'strong', 'auth', 'key', 'token'}; empty: harmless."""
    parts = [p.lower() for p in _PARTS.findall(name)]
    if parts and parts[-1] in _DESCRIPTORS:
        return set()
    found: set[str] = set()
    for i, part in enumerate(parts):
        if _STRONG.search(part):
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


def _keep(group: int, suffix: str = "") -> _Sub:
    """A substitution that keeps group ``group``, redacts the rest of the match and appends ``suffix``."""
    return lambda m: m.group(group) + REDACTED + suffix


def _name_value(m: re.Match[str]) -> str:
    name, value = m.group("name"), m.group("value")
    if not secret_value(name, value):
        return m.group(0)
    return m.group(0)[: m.start("value") - m.start(0)] + REDACTED


_CONTEXT_WORDS = ("token", "key", "secret", "passw", "passphrase", "credential", "cookie", "auth", "bearer",
                  "wandb")
"""Every contextual rule below needs one of these words (in any case): a text without any, as most log lines
are, skips those rules."""
_CONTEXT = "<a secret word>"
"""The guard of contextual rules: decided once per text, by :data:`_CONTEXT_WORDS`."""

_PATTERNS: tuple[tuple[str | None, re.Pattern[str], str | _Sub], ...] = (
    # (guard: a substring the text must contain for the rule to apply, _CONTEXT, or None: always;
    #  rule; replacement)
    # PEM private keys (whole block; an unterminated block is cut at the end of the text)
    ("-----BEGIN ", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE "
                               r"KEY-----|\Z)", re.S), REDACTED),
    # credentials in URLs: keep the scheme, drop user[:password]
    ("://", re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^\s/?#@'\"<>]+@)+"), _keep(1, "@")),
    # provider token shapes: AWS access key ids, Hugging Face, GitHub, OpenAI/Anthropic, Slack
    (None, re.compile(r"\b(?:(?:AKIA|ASIA)[0-9A-Z]{16}\b|hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{30,}"
                r"|github_pat_[A-Za-z0-9_]{22,}|sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,})"),
     REDACTED),
    # Authorization headers, keeping the scheme word; then any remaining `Bearer xyz`
    (_CONTEXT, re.compile(r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*[\"']?"
                              r"(?:(?:bearer|basic|token|digest)\s+)?)[^\s\"',;]+"), _keep(1)),
    (_CONTEXT, re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), _keep(1)),
    # W&B keys only in context: a bare 40-hex string is usually a git sha
    (_CONTEXT, re.compile(r"(?i)(\bwandb\s+login\b[^\n]*?)\b[0-9a-f]{40}\b"), _keep(1)),
    # --flag value / --flag=value in free text, and '--flag', 'value' in a printed list
    (_CONTEXT, re.compile(r"(?P<name>(?<![\w-])--?[A-Za-z][\w.-]*)(?:=|\s+|[\"']?\s*,\s*[\"']?)"
                              r"(?P<value>(?!-)[^\s\"',;&(){}\[\]]+)"), _name_value),
    # NAME=value, NAME: value, "name": "value"
    (_CONTEXT, re.compile(r"(?P<name>\b[A-Za-z_][\w.-]*)[\"']?(?:\s*=\s*|\s*:\s+|:)[\"']?"
                              r"(?!(?i:bearer|basic|digest|token)\s|//)(?P<value>(?!-)[^\s\"',;&(){}\[\]]+)"),
     _name_value),
)

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
        self._values: re.Pattern[str] | None = None
        self._compile()

    def _compile(self) -> None:
        alternatives = "|".join(re.escape(v) for v in sorted(self._secrets, key=len, reverse=True))
        self._values = re.compile(alternatives) if alternatives else None

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
        """``s`` with every secret-looking substring replaced by :data:`REDACTED`."""
        if self._values is not None:
            s = self._values.sub(REDACTED, s)
        lower = s.lower()
        context = any(word in lower for word in _CONTEXT_WORDS)
        for guard, pattern, replacement in _PATTERNS:
            if guard is None or (context if guard == _CONTEXT else guard in s):
                s = pattern.sub(replacement, s)
        return s

    def argv(self, args: Sequence[str]) -> list[str]:
        """A command with the values of secret flags redacted (``--flag value`` and ``--flag=value``), then
        :meth:`text` applied to every argument. A secret flag followed by another option is a switch
        (``--use-auth-token --bf16``): nothing is consumed. Each value redacted here is :meth:`learn`-ed, so
        the training output that echoes its own arguments is redacted too."""
        out: list[str] = []
        pending: str | None = None
        for arg in args:
            if pending is not None:
                flag, pending = pending, None
                if not arg.startswith("-") or _NUMBER.fullmatch(arg):
                    out.append(self._secret(arg) if secret_value(flag, arg) else self.text(arg))
                    continue
            eq = _FLAG_EQ.fullmatch(arg)
            if eq and secret_value(eq.group(1), eq.group(2)):
                out.append(f"{eq.group(1)}={self._secret(eq.group(2))}")
            elif not eq and _FLAG.fullmatch(arg) and looks_secret(arg):
                pending = arg
                out.append(arg)
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


__all__ = ["ALLOWED_NAMES", "ALLOWED_PREFIXES", "REDACTED", "Redactor", "looks_secret", "secret_value"]
