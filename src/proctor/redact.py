"""Secrets: which names are secret, and masking of secrets in anything proctor writes or prints.

One layer, used by every writer (run directories, the store, reports, the terminal):

- by name: `NAME=VALUE` and `Name: value` where NAME is secret-like (KEY, TOKEN, SECRET,
  PASSWORD, AUTH*, CREDENTIAL*, and the project's `[run] secret_names`), `--api-key VALUE`;
- by form: credentials in URLs (`https://user:pass@host` -> `https://***@host`),
  `Bearer X`, `Authorization: Basic X`, header values such as `-H "X-Api-Key: X"`;
- by value: once a value is known to be secret (a secret-named variable of the environment,
  a `--env` override, or a secret found by name or form in a command line), it is masked
  wherever it appears, in any text.

What is masked is what proctor copies from the user (argv, environment, messages, what it
prints of a command's output), never proctor's own words around it:

- documents (`data()`: records, plan.json, metrics, store rows) are walked, not rewritten as
  text: keys are never masked, nor the values of proctor's own fields (`run_id`, `kind`,
  `outcome`, `schema`, `created_at`, ...) nor a value that is a run id or a timestamp;
- lines printed on the terminal (`line()`, through `mask_output()`) are masked where a secret
  is, except where it would cut into a run id, a timestamp, a JSON key or one of proctor's own
  words (`proctor`, an outcome, a kind): a secret `failed` does not turn `failed, exit 1` into
  `***, exit 1`, and a run named `bearer` is not read as `Bearer <token>`.

`process_redactor()` is this process's one redactor: seeded from its own environment and
command line, and taught more by every plan it resolves. Writers call `text()` / `data()`.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO

MASK = "***"
# Shorter values would mask ordinary text ("1", "on"); such secrets are still masked by name.
_MIN_VALUE_LEN = 4


_SPLIT = re.compile(r"[^A-Z0-9]+")
# A flag of the command itself that carries a secret: --api-key X, --hf-token=X (not --max-tokens).
_SECRET_FLAG = re.compile(
    r"^--?(?:[a-z0-9]+[-_])*"
    r"(?:api[-_]?key|key|token|secret|password|passwd|pass|passphrase|pat|credentials?|auth)$",
    re.IGNORECASE,
)
# curl -u / --user USER:PASSWORD (also joined: -uUSER:PASSWORD, --user=USER:PASSWORD).
_USER_FLAGS = ("-u", "--user", "--proxy-user", "-U")
# mysql -pPASSWORD and -p PASSWORD: for this family only (`mkdir -p`, `ssh -p 22` are no secret).
_MYSQL = re.compile(r"^(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlsh|mariadb\S*)$")

# A secret ends at white space, a quote or a separator of the text around it (a backslash too:
# in JSON printed as text, `\"` closes the string the secret is in).
_VALUE = r"[^\s'\"`,;&|<>(){}\[\]\\]+"
# scheme://user:password@ loses its whole user part. A lone user is a secret only over HTTP
# (https://TOKEN@github.com); ssh://root@host names a user, and "root" is no secret.
# Each pattern starts only where a word starts, so a long unbroken word costs O(its length).
_URL_CREDS = re.compile(
    r"(?P<pre>(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://)(?P<info>[^\s/?#@'\"`]+)@", re.IGNORECASE
)
_BEARER = re.compile(rf"(?P<pre>\bBearer[ \t]+)(?P<secret>{_VALUE})", re.IGNORECASE)
# NAME=VALUE, Name: value, Name: Scheme value (headers, env words, flags written --name=value).
# The name is judged before its value is read, so a plain name costs nothing more.
# A JSON member `"api_key": "X"` is a name too: a quote may close the name and open the value.
_NAMED = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.-])[A-Za-z_][A-Za-z0-9_.-]*)\"?(?:[ \t]*:[ \t]*|=)\"?"
    r"(?:(?:Bearer|Basic|Token|Digest|ApiKey)[ \t]+)?",
    re.IGNORECASE,
)
# A scheme-less `user:password@host` (a DSN, `mysql://` written without its scheme).
_BARE_CREDS = re.compile(
    r"(?<![A-Za-z0-9_.+/:@-])(?P<user>[A-Za-z_][A-Za-z0-9_.+-]*):(?P<secret>[^\s/?#@:'\"`]+)@"
    r"(?=[A-Za-z0-9][A-Za-z0-9.-]*(?:[:/\s'\"`]|$))"
)
_SECRET = re.compile(_VALUE)


def is_secret_name(name: str, extra_names: Iterable[str] = ()) -> bool:
    """True for HF_TOKEN, RUNPOD_API_KEY, APIKEY, DB_PASSWORD, AUTHORIZATION, Cookie;
    not MAX_TOKENS."""
    upper = name.upper()
    if any(upper == extra.upper() for extra in extra_names):
        return True
    for part in _SPLIT.split(upper):
        if not part:
            continue
        if part.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "COOKIE")):
            return True
        if part.startswith(("AUTH", "CREDENTIAL", "SECRET", "PASSWORD")):
            return True
        if part in ("PAT", "PASS", "PASSPHRASE"):  # GITHUB_PAT, DB_PASS
            return True
    return False


def _url_secret(match: re.Match[str]) -> str | None:
    """The secret of a URL's user part: the password, or over HTTP a lone user (a token)."""
    user, sep, password = match.group("info").partition(":")
    if sep:
        return password or None
    if match.group("pre").lower().startswith(("http://", "https://")) and user != MASK:
        return user
    return None


def _is_secret_word(name: str, extra_names: Iterable[str]) -> bool:
    """The stricter test for a name met in free text: its last part must be secret-like, so that
    `Authorization: X` and `X-Api-Key: X` are masked, `total_token_throughput=1234` is not."""
    if any(name.upper() == extra.upper() for extra in extra_names):
        return True
    parts = [p for p in _SPLIT.split(name.upper()) if p]
    return bool(parts) and is_secret_name(parts[-1])


# Values that are never secrets, whatever their name: flags written NAME=true and the like.
_PLAIN_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off", "0", "1"})


class Redactor:
    """Masks secrets by name, by form and by value; learns values as it meets them."""

    def __init__(self, values: Iterable[str] = (), extra_names: Iterable[str] = ()) -> None:
        self.extra_names: tuple[str, ...] = ()
        self._values: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self.add_names(extra_names)
        self.add(values)

    @classmethod
    def from_environment(
        cls,
        overrides: Mapping[str, str] = {},
        extra_names: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Redactor:
        """Secrets are the secret-named values among the overrides and proctor's own environment."""
        redactor = cls((), extra_names)
        redactor.learn_env(overrides)
        redactor.learn_env(os.environ if environ is None else environ)
        return redactor

    # -- learning -----------------------------------------------------------------------------
    def add(self, values: Iterable[str]) -> None:
        """Known secret values: masked wherever they appear from now on."""
        known = set(self._values)
        new = {v for v in values if len(v) >= _MIN_VALUE_LEN and v != MASK and v not in known}
        if not new:
            return
        # Longest first so that a secret containing another is masked whole.
        self._values = sorted({*self._values, *new}, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in self._values))

    def add_names(self, names: Iterable[str]) -> None:
        self.extra_names = tuple(dict.fromkeys([*self.extra_names, *names]))

    def learn_env(self, mapping: Mapping[str, str]) -> None:
        """Secret-named values, and credentials inside any value (a proxy URL with a password)."""
        self.add(v for k, v in mapping.items() if self.is_secret(k))
        for value in mapping.values():
            self.learn_text(value)

    def learn_text(self, text: str) -> None:
        """The secrets that a text shows by name or by form."""
        spans = self._form_spans(text, messages=False, learning=True)
        self.add(text[start:end] for start, end in spans)

    def learn_argv(self, argv: Iterable[str]) -> None:
        """The secrets of a command line: flags such as --api-key X, headers, credentials."""
        words = list(argv)
        spans = _flag_spans(words)
        for i, word in enumerate(words):
            if i in spans:
                start, end = spans[i]
                self.add([word[start:end]])
            self.learn_text(_header_text(word))

    def is_secret(self, name: str) -> bool:
        return is_secret_name(name, self.extra_names)

    # -- masking ------------------------------------------------------------------------------
    def text(self, value: str) -> str:
        """A string the user gave (a word of a command, a value, a message quoting them):
        every secret in it masked."""
        spans = self._form_spans(value, messages=False)
        return _replace(value, [*self._value_spans(value), *spans])

    def line(self, value: str) -> str:
        """A text proctor wrote around the user's words (a line it prints, a summary file):
        masked as `text`, except where a mask would cut into proctor's own words (a run id, a
        timestamp, a JSON key, an outcome or kind, `proctor`), which a secret cannot hide."""
        return self._masked(value, _OWN_TEXT, messages=True)

    def _masked(self, value: str, own: re.Pattern[str], messages: bool) -> str:
        spans = [*self._value_spans(value), *self._form_spans(value, messages)]
        if not spans:
            return value
        kept = [m.span() for m in own.finditer(value)]
        return _replace(value, [s for s in spans if not any(_overlap(s, o) for o in kept)])

    def _value_spans(self, text: str) -> list[tuple[int, int]]:
        return [] if self._pattern is None else [m.span() for m in self._pattern.finditer(text)]

    def _form_spans(
        self, text: str, messages: bool, learning: bool = False
    ) -> list[tuple[int, int]]:
        """Spans of secrets shown by form (URL and bare credentials, Bearer) or by name."""
        spans: list[tuple[int, int]] = []
        for match in _URL_CREDS.finditer(text):
            secret = _url_secret(match)
            if secret is not None:  # the whole user part is masked; the secret is learned
                start, end = match.span("info")
                spans.append((end - len(secret), end) if learning else (start, end))
        spans += [m.span("secret") for m in _BARE_CREDS.finditer(text)]
        spans += [m.span("secret") for m in _BEARER.finditer(text)]
        spans += list(self._named_secrets(text, messages))
        return [(a, b) for a, b in spans if text[a:b] != MASK]

    def _named_secrets(self, text: str, messages: bool = False) -> Iterator[tuple[int, int]]:
        """Spans of the values of secret names. A plain name gives up only itself, so that
        `https://h/?api_key=X` and `x=a&token=X` still reach the secret after it. In a line
        proctor prints (`messages`), `run.bogus_key: unknown field` is a dotted place and a
        message about it, not a header."""
        pos = 0
        while (head := _NAMED.search(text, pos)) is not None:
            pos = head.end("name")
            name = head.group("name")
            if not _is_secret_word(name, self.extra_names):
                continue
            if messages and "." in name and "=" not in head.group(0):
                continue
            value = _SECRET.match(text, head.end())
            if value is None:
                continue
            secret = value.group(0)
            if secret != MASK and secret.lower() not in _PLAIN_VALUES:
                yield value.start(), value.end()
            pos = value.end()

    def env(self, mapping: Mapping[str, str]) -> dict[str, str]:
        return {k: (MASK if self.is_secret(k) else self.text(v)) for k, v in mapping.items()}

    def argv(self, argv: Iterable[str]) -> list[str]:
        words = list(argv)
        spans = _flag_spans(words)
        out: list[str] = []
        for i, word in enumerate(words):
            if i in spans:
                start, end = spans[i]
                word = word[:start] + MASK + word[end:]
            if word.startswith("-H") and len(word) > 2:  # curl's joined -HName:value
                out.append("-H" + self.text(word[2:]))
            else:
                out.append(self.text(word))
        return out

    def data(self, value: Any, _own: str = "user") -> Any:
        """A JSON-like document with the user's strings in it masked, walked (never rewritten
        as text): keys are kept, so are proctor's own fields (run ids, kinds, outcomes, schema,
        times: `_OWN_FIELDS`) and the run ids, timestamps and proctor's own file names inside
        a value; proctor's own descriptions (`origin`: "derived from the command") are masked
        as the lines it prints."""
        if isinstance(value, str):
            if _own == "own":
                return value
            if _own == "line":
                return self.line(value)
            # A path that holds a run id (`.../runs/20261204-...`) keeps it whole.
            return self._masked(value, _OWN_VALUES, messages=False)
        if isinstance(value, Mapping):
            return {k: self.data(v, _field_kind(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v, _own) for v in value]
        return value


# Fields whose values proctor writes itself: identifiers, enums, schema names, times, digests.
_OWN_FIELDS = frozenset(
    {
        "schema",
        "schema_version",
        "id",
        "run_id",
        "kind",
        "outcome",
        "status",
        "state",
        "decided_by",
        "signal",
        "exit_signal",
        "event",
        "step",
        "time",
        "log",
        "dir",
        "proctor_version",
        "commit",
        "source_commit",
        "sha256",
        "digest",
        "dirty",
        "points",
    }
)
_OWN_SUFFIXES = ("_at", "_id", "_ids", "_run", "_runs", "_sha256", "_commit", "_outcome")
_RUN_ID_TEXT = r"\d{8}-\d{6}-[0-9a-f]{6}"
_TIME_TEXT = (
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?)?"
)
_OWN_NAMES = r"(?<![A-Za-z0-9_-])proctor\.(?:sqlite|toml)\b"
_OWN_VALUES = re.compile(rf"{_RUN_ID_TEXT}|{_TIME_TEXT}|{_OWN_NAMES}")
# Fields whose values are proctor's own words around the user's: masked as printed lines.
_LINE_FIELDS = frozenset({"origin"})
# proctor's own words in a line it prints: a secret equal to one of them cannot be hidden there.
_OWN_WORDS = (
    "proctor",
    "proctor.run",
    "ok",
    "failed",
    "timeout",
    "stopped",
    "unknown",
    "running",
    "starting",
    "pending",
    "command",
    "server",
    "bench",
    "eval",
    "offline",
    "workload",
    "slurm",
    "slurm-node",
    "flow",
    "sweep",
    "remote",
    "run",
    "runs",
    "exit",
    "local",
    "ssh",
    "runpod",
)
_OWN_TEXT = re.compile(
    rf"{_RUN_ID_TEXT}|{_TIME_TEXT}|{_OWN_NAMES}|\"[^\"\n]*\"(?=[ \t]*:)"
    rf"|(?<![A-Za-z0-9_.-])(?:{'|'.join(re.escape(w) for w in _OWN_WORDS)})(?![A-Za-z0-9_-])",
    re.IGNORECASE,
)


def _field_kind(key: Any) -> str:
    """ "own" (never masked), "line" (proctor's words around the user's) or "user"."""
    if not isinstance(key, str):
        return "user"
    if key in _OWN_FIELDS or key.endswith(_OWN_SUFFIXES):
        return "own"
    return "line" if key in _LINE_FIELDS else "user"


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with each span (overlapping ones merged) replaced by the mask."""
    if not spans:
        return text
    out: list[str] = []
    done = 0
    for start, end in sorted(spans):
        if end <= done:
            continue
        start = max(start, done)
        if start > done or not out or out[-1] != MASK:
            out.append(text[done:start])
            out.append(MASK)
        done = end
    return "".join(out) + text[done:]


def _header_text(word: str) -> str:
    """The header of curl's joined `-HAuthorization: Bearer X`, or the word itself."""
    return word[2:] if word.startswith("-H") and len(word) > 2 else word


def _flag_spans(argv: list[str]) -> dict[int, tuple[int, int]]:
    """Per word of a command line, the span that a flag says is a secret: the value of
    `--api-key X` / `--db-pass=X`, the password of `curl -u USER:PASSWORD`, of mysql's `-pX`
    and `-p X`."""
    spans: dict[int, tuple[int, int]] = {}
    mysql = False
    previous = ""
    for i, word in enumerate(argv):
        name, sep, _ = word.partition("=")
        if _SECRET_FLAG.match(previous) and "=" not in previous:
            spans[i] = (0, len(word))
        elif previous in _USER_FLAGS and ":" in word:
            spans[i] = (word.index(":") + 1, len(word))
        elif mysql and previous == "-p" and not word.startswith("-"):
            spans[i] = (0, len(word))
        elif sep and _SECRET_FLAG.match(name):
            spans[i] = (len(name) + 1, len(word))
        elif sep and name in _USER_FLAGS and ":" in word[len(name) + 1 :]:
            spans[i] = (word.index(":", len(name) + 1) + 1, len(word))
        elif word.startswith("-u") and not word.startswith("--") and ":" in word:
            spans[i] = (word.index(":") + 1, len(word))
        elif mysql and word.startswith("-p") and not word.startswith("--") and len(word) > 2:
            spans[i] = (2, len(word))
        mysql = mysql or bool(_MYSQL.match(os.path.basename(word)))
        previous = "" if i in spans else word
    return {i: span for i, span in spans.items() if span[1] > span[0]}


_PROCESS: Redactor | None = None


def process_redactor() -> Redactor:
    """This process's redactor: its environment and command line, and all it has been taught."""
    global _PROCESS
    if _PROCESS is None:
        _PROCESS = Redactor.from_environment()
        # Forms and names only: proctor's own `--key K` is an attach key, not a secret, and
        # flags of a command after `--` are learned when its plan is resolved.
        for word in sys.argv:
            _PROCESS.learn_text(word)
    return _PROCESS


def remember(redactor: Redactor) -> Redactor:
    """Teach this process's redactor what another knows; returns the process's one."""
    process = process_redactor()
    process.add_names(redactor.extra_names)
    process.add(redactor._values)
    return process


def text(value: str) -> str:
    return process_redactor().text(value)


def line(value: str) -> str:
    return process_redactor().line(value)


def data(value: Any) -> Any:
    return process_redactor().data(value)


def unmasked(stream: TextIO) -> TextIO:
    """The stream under a MaskedStream: for text masked already, field by field (`data`)."""
    return stream._stream if isinstance(stream, MaskedStream) else stream


class MaskedStream(io.TextIOBase):
    """A text stream that masks every write. `buffer` stays the raw one: a command's own output
    that proctor relays (`proctor run` in the foreground) is the command's, not proctor's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream.write(line(s))
        return len(s)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors

    @property
    def buffer(self) -> Any:
        return self._stream.buffer

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        # Anything else (reconfigure, line_buffering, ...) is the wrapped stream's.
        return getattr(self._stream, name)


def mask_output() -> None:
    """From here on, everything this process prints as text on stdout and stderr is masked."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, MaskedStream):
            setattr(sys, name, MaskedStream(stream))
