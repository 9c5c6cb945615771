"""Secrets: which names are secret, and masking of secrets in anything proctor writes or prints.

One layer, used by every writer (run directories, the store, reports, the terminal):

- by name: `NAME=VALUE` and `Name: value` where NAME is secret-like (KEY, TOKEN, SECRET,
  PASSWORD, AUTH*, CREDENTIAL*, and the project's `[run] secret_names`), `--api-key VALUE`;
- by form: credentials in URLs (`https://user:pass@host` -> `https://***@host`),
  `Bearer X`, `Authorization: Basic X`, header values such as `-H "X-Api-Key: X"`;
- by value: once a value is known to be secret (a secret-named variable of the environment,
  a `--env` override, or a secret found by name or form in a command line), it is masked
  wherever it appears, in any text.

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
    r"^--?(?:[a-z0-9]+[-_])*(?:api[-_]?key|key|token|secret|password|passwd|credentials?|auth)$",
    re.IGNORECASE,
)

# A secret ends at white space, a quote or a separator of the text around it.
_VALUE = r"[^\s'\"`,;&|<>(){}\[\]]+"
# scheme://user:password@ loses its whole user part. A lone user is a secret only over HTTP
# (https://TOKEN@github.com); ssh://root@host names a user, and "root" is no secret.
# Each pattern starts only where a word starts, so a long unbroken word costs O(its length).
_URL_CREDS = re.compile(
    r"(?P<pre>(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://)(?P<info>[^\s/?#@'\"`]+)@", re.IGNORECASE
)
_BEARER = re.compile(rf"(?P<pre>\bBearer[ \t]+)(?P<secret>{_VALUE})", re.IGNORECASE)
# NAME=VALUE, Name: value, Name: Scheme value (headers, env words, flags written --name=value).
# The name is judged before its value is read, so a plain name costs nothing more.
_NAMED = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.-])[A-Za-z_][A-Za-z0-9_.-]*)(?:[ \t]*:[ \t]*|=)"
    r"(?:(?:Bearer|Basic|Token|Digest|ApiKey)[ \t]+)?",
    re.IGNORECASE,
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
        found: list[str] = []
        for match in _URL_CREDS.finditer(text):
            secret = _url_secret(match)
            if secret is not None:
                found.append(secret)
        found += [m.group("secret") for m in _BEARER.finditer(text)]
        found += [text[start:end] for start, end in self._named_secrets(text)]
        self.add(found)

    def learn_argv(self, argv: Iterable[str]) -> None:
        """The secrets of a command line: flags such as --api-key X, headers, credentials."""
        take_next = False
        for arg in argv:
            if take_next:
                self.add([arg])
                take_next = False
            name, sep, value = arg.partition("=")
            if _SECRET_FLAG.match(name):
                if sep:
                    self.add([value])
                else:
                    take_next = True
            self.learn_text(arg)

    def is_secret(self, name: str) -> bool:
        return is_secret_name(name, self.extra_names)

    # -- masking ------------------------------------------------------------------------------
    def text(self, value: str) -> str:
        if self._pattern is not None:
            value = self._pattern.sub(MASK, value)
        value = _URL_CREDS.sub(
            lambda m: m.group(0) if _url_secret(m) is None else f"{m.group('pre')}{MASK}@", value
        )
        value = _BEARER.sub(lambda m: f"{m.group('pre')}{MASK}", value)
        out: list[str] = []
        done = 0
        for start, end in self._named_secrets(value):
            out += [value[done:start], MASK]
            done = end
        return "".join(out) + value[done:]

    def _named_secrets(self, text: str) -> Iterator[tuple[int, int]]:
        """Spans of the values of secret names. A plain name gives up only itself, so that
        `https://h/?api_key=X` and `x=a&token=X` still reach the secret after it."""
        pos = 0
        while (head := _NAMED.search(text, pos)) is not None:
            pos = head.end("name")
            if not _is_secret_word(head.group("name"), self.extra_names):
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
        out: list[str] = []
        hide_next = False
        for arg in argv:
            if hide_next:
                out.append(MASK)
                hide_next = False
                continue
            name, sep, _ = arg.partition("=")
            if _SECRET_FLAG.match(name):
                if sep:
                    out.append(f"{name}={MASK}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
            out.append(self.text(arg))
        return out

    def data(self, value: Any) -> Any:
        """A JSON-like value with every string in it masked (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {(self.text(k) if isinstance(k, str) else k): self.data(v)
                    for k, v in value.items()}  # fmt: skip
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value


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


def data(value: Any) -> Any:
    return process_redactor().data(value)


class MaskedStream(io.TextIOBase):
    """A text stream that masks every write. `buffer` stays the raw one: a command's own output
    that proctor relays (`proctor run` in the foreground) is the command's, not proctor's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        self._stream.write(text(s))
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
