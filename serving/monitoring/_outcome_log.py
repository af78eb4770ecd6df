"""The SDK's outcome log: what the router decided, what ran, and how it turned out.

`execute()` appends a `request` record, `feedback()` a `feedback` record, a shadow run a `shadow`
record (docs/traffic.md#the-outcome-log-sdk). Writing never holds up a request: a bounded queue that
one daemon thread appends to rotating JSON-lines files. Every string a record holds is declared in
STRING_FIELDS, and the writer applies the privacy mode (PRIVACY_MODES, docs/traffic.md "Privacy") to
each before anything is encoded: a record with a string anywhere else is refused and counted, so no
field can carry request text past the mode. A conversation id is always written as its pseudonym.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import json
import logging
import os
import random
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

from serving._json_values import finite_number, nests_deeper_than
from serving._router_error import RouterError

if TYPE_CHECKING:
    from typing_extensions import TypeAlias

    # A record as handed in: field -> a JSON value, or an exception the writer turns into text as the
    # privacy mode says (Any: the writer checks every value itself, see _private and _codes_only).
    Record: TypeAlias = dict[str, Any]
    # A record, or a callable the writer thread calls to build it (the request pays for queueing only).
    RecordSource: TypeAlias = Union[Record, Callable[[], Record]]

log = logging.getLogger("serving")

LOG_FORMAT = "edge-cloud-router/outcome/1"  # every record's "log" field: how readers detect the format
FILE_PATTERN = "outcomes-*.jsonl"  # the log's files in a folder; their names sort in time order
PRIVACY_MODES = ("text", "token_ids", "embedding")
MESSAGE_CHARS = 300  # an error message is cut to this, after redaction

# What each string of a record is, by its path ("steps[].name": the name of each step).
TEXT = "text"  # what was asked and answered: kept in mode "text" (redacted), else null
MESSAGE = "message"  # an exception, whose text may quote the request: redacted, or its class
LABEL = "label"  # the app's own words (a feedback source): redacted, or kept only as a label
CODE = "code"  # written by the SDK from a closed set, or an id: written as is
PSEUDONYM = "pseudonym"  # the app's identifier of something (a conversation): written as its pseudonym
STRING_FIELDS = {
    "prompt": TEXT,
    "edge_response": TEXT,
    "cloud_response": TEXT,
    "response": TEXT,
    "fallback_error": MESSAGE,
    "error": MESSAGE,
    "source": LABEL,
    "log": CODE,
    "type": CODE,
    "request_id": CODE,
    "precision": CODE,
    "model_version": CODE,
    "zone": CODE,
    "target": CODE,
    "served_by": CODE,
    "side": CODE,
    "fallback_reason": CODE,
    "rule": CODE,  # a policy rule's name (serving.policy._rules checks its shape)
    "forbidden[]": CODE,
    "steps[].name": CODE,
    "steps[].status": CODE,
    "tried[].endpoint": CODE,  # an endpoint's name (serving.endpoints._record.NAME_SHAPE, checked by execute())
    "tried[].outcome": CODE,
    "tried[].error": CODE,  # an exception's class name
    "endpoint": CODE,  # an N-endpoint bundle's chosen endpoint, and its endpoints and cascade (names)
    "endpoints[]": CODE,
    "cascade[]": CODE,
    "conversation": PSEUDONYM,  # the request's conversation id (serving.routing._request.Request.conversation)
    "features.model_version": CODE,
    "features.tokenizer_sha256": CODE,
    "features.encoder_sha256": CODE,
    "features.feature_names[]": CODE,
}
_LABEL_SHAPE = re.compile(r"[A-Za-z0-9_.:/+-]{1,64}")  # "thumbs", "judge:gpt-4o"; no spaces, no "@"


class RecordError(RouterError, ValueError):
    """A record the log does not write: the message says which field and why (never its value)."""


class UndeclaredText(RecordError):
    """A record holds a string where STRING_FIELDS declares none."""


def error_code(error: BaseException) -> str:
    """An exception without its text: its class, and its cause's ("CloudCallError from ConnectionError")."""
    cause = error.__cause__
    return type(error).__name__ + (f" from {type(cause).__name__}" if cause is not None else "")


def _privacy(privacy: str | None, store_prompts: bool | None) -> str:
    """The mode named by `privacy`, or by the older `store_prompts` flag (True: "text", False: "token_ids")."""
    if privacy is not None and privacy not in PRIVACY_MODES:
        raise ValueError(f"privacy={privacy!r}: use one of {', '.join(PRIVACY_MODES)}")
    if store_prompts is None:
        return privacy or "text"
    implied = "text" if store_prompts else "token_ids"
    if privacy is not None and privacy != implied:
        raise ValueError(f"store_prompts={store_prompts!r} contradicts privacy={privacy!r}: give privacy= alone")
    return implied


class OutcomeLog:
    """A folder of rotating JSONL outcome files, written by one background thread."""

    def __init__(
        self,
        folder: str | Path,
        *,
        privacy: str | None = None,
        store_prompts: bool | None = None,
        redact: Callable[[str], str] | None = None,
        max_queue: int = 10_000,
        max_file_bytes: int = 64 << 20,
        flush_interval_s: float = 0.05,
        fsync: bool = False,
        conversation_key: bytes | None = None,
    ):
        if not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"max_queue={max_queue!r}: must be an integer >= 1")
        if not isinstance(max_file_bytes, int) or max_file_bytes < 1024:
            raise ValueError(f"max_file_bytes={max_file_bytes!r}: must be an integer >= 1024")
        interval = finite_number(flush_interval_s)  # None for a bool, NaN or what is not a number
        if interval is None or not 0 < interval <= 60:
            raise ValueError(f"flush_interval_s={flush_interval_s!r}: must be a number of seconds in (0, 60]")
        if redact is not None and not callable(redact):
            raise TypeError("redact must be a callable text -> text")
        if conversation_key is not None and (not isinstance(conversation_key, bytes) or len(conversation_key) < 16):
            raise ValueError("conversation_key must be a secret of at least 16 bytes (os.urandom(32)), or None")
        self._conversation_key = conversation_key
        self.folder, self.privacy, self.redact = Path(folder), _privacy(privacy, store_prompts), redact
        self.max_queue, self.max_file_bytes, self.flush_interval_s = max_queue, max_file_bytes, flush_interval_s
        self.fsync = bool(fsync)
        # A deque, not a queue.Queue: appending takes no lock and wakes no thread (~0.1 us, not ~1-3 us);
        # the writer takes what gathered every flush_interval_s. Woken per record, it took the GIL from the
        # request thread on every request: +85 us p50 back to back, measured, against +13 us for the record.
        self._pending: collections.deque[RecordSource] = collections.deque()
        self._wake = threading.Event()
        self._busy = False  # the writer holds records it took from _pending
        self._lock = threading.Lock()
        self.written = 0  # records whose whole line the kernel took (fsync=True: synced)
        self.dropped = 0  # queue full, disk refused, or a record that could not be built or encoded
        self.last_error: str | None = None
        self._warned: set[str] = set()
        self._fd: int | None = None
        self._path: Path | None = None
        self._file_bytes = 0  # the whole records in the open file
        self._files = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name="outcome-log-writer")
        self._thread.start()

    @property
    def store_prompts(self) -> bool:
        """Whether the prompt and answers are kept (privacy "text")."""
        return self.privacy == "text"

    # The request path: never blocks, never raises.
    def append(self, record: RecordSource) -> bool:
        """Queue a record, or a callable the writer thread calls to build it (the request pays only for
        queueing); False, counted in `dropped`, when the queue is full or closed."""
        if self._closed:
            self._count_dropped(1)
            return False
        if len(self._pending) >= self.max_queue:
            self._count_dropped(1)
            self._warn_once("queue", f"outcome log queue full ({self.max_queue} records): records are dropped")
            return False
        self._pending.append(record)
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Write what is queued now; False if `timeout` passed first."""
        deadline = time.monotonic() + timeout
        self._wake.set()
        while (self._pending or self._busy) and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.002)
            self._wake.set()
        return not (self._pending or self._busy)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop the writer."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():  # appended while closing: counted, not silently lost
            self._count_dropped(len(self._pending))
            self._pending.clear()

    # The writer thread.
    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            closing = self._closed
            while self._pending:
                self._busy = True
                batch = [self._pending.popleft() for _ in range(min(len(self._pending), 512))]
                try:
                    self._write([line for line in map(self._line, batch) if line is not None])
                except Exception as exc:  # never let the writer die: count the batch and go on
                    self._count_dropped(len(batch))
                    self._warn_once("writer", f"outcome log writer failed: {exc!r}"[:300])
            self._busy = False
            if closing:
                self._close_file()
                return

    def _line(self, record: RecordSource) -> bytes | None:
        try:
            if callable(record):
                record = record()
            private = self._private(record)
        except Exception as exc:  # a RecordError's text is safe; a builder's or redact hook's may quote the request
            why = str(exc) if isinstance(exc, RecordError) else f"{error_code(exc)} raised while building it"
            self._not_written(type(exc).__name__, why)
            return None
        try:
            line = (json.dumps(private, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8", "surrogatepass")
        except (TypeError, ValueError) as exc:  # a value JSON cannot hold (NaN, an object): json names its type
            self._not_written("json", str(exc))
            return None
        if len(line) > MAX_LINE_BYTES:  # every reader would refuse it: counted as not written instead
            self._not_written("size", f"its line has {len(line):,} bytes, over the readers' {MAX_LINE_BYTES:,}")
            return None
        return line

    def _not_written(self, kind: str, why: str) -> None:
        self._count_dropped(1)
        self._warn_once(kind, f"outcome record not written: {why}"[:400])

    # Privacy: every string of a record passes here (module doc).
    def _private(self, record: Record) -> Record:
        """The record as this privacy mode writes it; UndeclaredText for a string STRING_FIELDS does not declare."""
        out: Record = {}
        for key, value in record.items():
            kind = STRING_FIELDS.get(key)
            if value is None or kind in (None, CODE):
                _codes_only(value, key)
            elif kind == TEXT:
                value = self._redacted(_text(key, value)) if self.privacy == "text" else None
            elif kind == MESSAGE:
                value = self._message(key, value)
            elif kind == PSEUDONYM:
                value = pseudonym(_text(key, value), self._conversation_key)
            else:
                value = self._label(_text(key, value))
            out[key] = value
        return out

    def _redacted(self, text: str) -> str:
        if self.redact is None:
            return text
        redacted = self.redact(text)
        if not isinstance(redacted, str):
            raise RecordError(f"redact returned {type(redacted).__name__}, not text")
        return redacted

    def _message(self, key: str, value: object) -> str | None:
        """An exception (or a message) as this mode writes it: its text redacted whole, then cut;
        or, without text, its class."""
        if self.privacy != "text":
            return error_code(value) if isinstance(value, BaseException) else None
        text = repr(value) if isinstance(value, BaseException) else _text(key, value)
        return self._redacted(text)[:MESSAGE_CHARS]

    def _label(self, text: str) -> str | None:
        if self.privacy == "text":
            return self._redacted(text)
        return text if _LABEL_SHAPE.fullmatch(text) else None

    # Appending to the files.
    def _write(self, lines: list[bytes]) -> None:
        """Append the lines, file by file; at the first refusal the rest of the batch is dropped
        and counted, and the file stays open for the next batch (a full disk creates no files)."""
        at = 0
        while at < len(lines):
            try:
                if self._fd is None or self._file_bytes >= self.max_file_bytes:
                    self._open_next()
            except OSError as exc:
                self._refused(len(lines) - at, exc)
                return
            end = self._fitting(lines, at)
            kept, error = self._append(lines[at:end])
            with self._lock:
                self.written += kept
            at += kept
            if error is not None:
                self._refused(len(lines) - at, error)
                return

    def _fitting(self, lines: list[bytes], at: int) -> int:
        """The end of the lines from `at` for the open file: at least one, more while it is under max_file_bytes."""
        size, end = self._file_bytes + len(lines[at]), at + 1
        while end < len(lines) and size < self.max_file_bytes:
            size += len(lines[end])
            end += 1
        return end

    def _append(self, chunk: list[bytes]) -> tuple[int, OSError | None]:
        """(how many of the chunk's lines are now whole in the file, the error that stopped the rest). A
        refused write leaves no part of a line: the file is cut back to its last whole record, or closed."""
        assert self._fd is not None  # _write opened the file
        data = memoryview(b"".join(chunk))
        done = 0
        try:
            while done < len(data):
                done += os.write(self._fd, data[done:])
            if self.fsync:
                os.fsync(self._fd)
        except OSError as exc:
            kept, size = 0, 0
            if done < len(data):  # whole lines before the refusal stay; after a failed fsync none is promised
                while kept < len(chunk) and size + len(chunk[kept]) <= done:
                    size += len(chunk[kept])
                    kept += 1
            self._file_bytes += size
            if size < done:
                try:
                    os.ftruncate(self._fd, self._file_bytes)
                except OSError:
                    self._close_file(cut_short=True)
            return kept, exc
        self._file_bytes += len(data)
        return len(chunk), None

    def _open_next(self) -> None:
        self._close_file()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._files += 1
        name = f"outcomes-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{self._files:04d}.jsonl"
        self._fd = os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
        self._path, self._file_bytes = self.folder / name, 0

    def _close_file(self, *, cut_short: bool = False) -> None:
        """Close the open file; one that holds no whole record (a first write refused) is removed."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if self._file_bytes == 0 and self._path is not None:  # set with _fd: never None here
            with contextlib.suppress(OSError):
                self._path.unlink(missing_ok=True)
        if cut_short:
            self._warn_once(
                "cut",
                f"outcome log could not cut {self._path} back to its last whole record: its last "
                "line is partial (the reader reports it); writing goes on in a new file",
            )
        self._fd = self._path = None

    def _refused(self, n: int, exc: OSError) -> None:
        self._count_dropped(n)
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._warn_once(
            "disk",
            f"outcome log cannot write to {self.folder}: {self.last_error}; routing continues, "
            "records are dropped and counted",
        )

    def _count_dropped(self, n: int) -> None:
        with self._lock:
            self.dropped += n

    def _warn_once(self, kind: str, message: str) -> None:
        """One warning per kind of trouble, so that a full disk does not hide a refused record."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(message)


_PSEUDONYM_DOMAIN = b"edge-cloud-router/conversation\0"


def pseudonym(identifier: str, key: bytes | None = None) -> str:
    """How the log writes an identifier of the app's: 32 hex characters of its SHA-256, or of its
    HMAC-SHA-256 under `key` (without one, a guessable id can be confirmed by hashing guesses)."""
    data = identifier.encode("utf-8", "surrogatepass")
    if key is not None:
        return hmac.new(key, data, hashlib.sha256).hexdigest()[:32]
    return hashlib.sha256(_PSEUDONYM_DOMAIN + data).hexdigest()[:32]


def _text(key: str, value: object) -> str:
    if not isinstance(value, str):
        raise RecordError(f"record field {key!r} must be text or null, not {type(value).__name__}")
    return value


_NUMBERS = frozenset({int, float, bool, type(None)})


def _codes_only(value: object, path: str) -> None:
    """Raise UndeclaredText when `value` holds a string at a path STRING_FIELDS does not declare a code."""
    if isinstance(value, str):
        if STRING_FIELDS.get(path) != CODE:
            raise UndeclaredText(
                f"record field {path!r} holds text, and serving.monitoring._outcome_log.STRING_FIELDS does not "
                "say what it is: the record is not written (declare the field there)"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            _codes_only(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)) and not _NUMBERS.issuperset(map(type, value)):
        for item in value:
            _codes_only(item, f"{path}[]")


_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))  # forked workers never share ids


def new_request_id() -> str:
    """128 random bits as hex, unique across threads, processes and forks. From a generator
    seeded once from os.urandom: asking the kernel per request (uuid4, os.urandom) measured
    5-7 us here, more than the rest of the record. Not a secret: ids only join records."""
    return f"{_ids.getrandbits(128):032x}"


def answer_text(response: object) -> str | None:
    """The text of an answer for the log: a str as is, a chat-completions body's message, else None (no objects)."""
    if isinstance(response, dict):
        try:
            response = response["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return None
    return response if isinstance(response, str) else None


# Reading the log back: regular files only (open_log_file), read in bounded pieces: a line longer than
# MAX_LINE_BYTES is skipped to its newline without being held, so a reader's memory is about
# MAX_LINE_BYTES (and what it keeps of each record) whatever the file holds.
MAX_LINE_BYTES = 8 << 20  # one record's line; the SDK's longest records (long prompt and answer) are far below it
_SKIP_BYTES = 1 << 20  # the piece an over-long line is skipped in
# Numbers that are not a finite double: NaN and Infinity are refused as the parser meets them. An
# integer beyond 1.8e308 (309+ digits) or an overflowing float (1e400) can only be on a line where,
# digits read as 0 and "+" left out, 200 zeros or "0e000" (a 3-digit exponent) occur: only such a
# line is parsed with a check per number (two C-speed searches, not a Python call per number).
_AS_ZEROS = bytes.maketrans(b"123456789E", b"000000000e")
_LONG_RUN, _BIG_EXPONENT = b"0" * 200, b"0e000"
_FLOAT_MAX_INT = int(1.7976931348623157e308)
MAX_DEPTH = 64  # lists and objects in one record; deeper would make readers' own recursion (repr, dumps) fail
# Values (numbers, lists, objects, ...) outside strings in one line: what parsing it costs beyond its
# bytes (8 MiB of [{},{},...] parse to 2.8 million objects, 400 MB). Records hold a few hundred
# (token ids up to the bundle's max_tokens, an embedding): a longer line must stay under it.
MAX_VALUES = 100_000
_COUNT_VALUES_FROM = 256 << 10  # characters: a shorter line costs little whatever it holds (130,000 values, 10 MB)
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, escapes and all


@dataclass(frozen=True)
class LoggedLine:
    """One non-blank line of a log file as read back: its record (a dict of this log's format), or
    why it is none (`problem`). `last`: the file's last line with no newline; `cut_short`: such a
    line whose JSON stops mid-way, what a process killed mid-write (or a writer still at work) leaves."""

    file: str
    line: int
    record: dict[str, Any] | None
    problem: str | None = None
    last: bool = False
    cut_short: bool = False


class _OutOfRange(RouterError, ValueError):
    pass


def _checked_int(text: str) -> int:
    if len(text) > 320 or abs(value := int(text)) > _FLOAT_MAX_INT:
        raise _OutOfRange(f"an integer of {len(text.lstrip('-'))} digits")
    return value


def _checked_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _OutOfRange(f"{text[:40]} overflows a double")
    return value


def _no_constant(name: str) -> float:
    raise _OutOfRange(name)


_PARSER = json.JSONDecoder(parse_constant=_no_constant)
_CHECKED = json.JSONDecoder(parse_int=_checked_int, parse_float=_checked_float, parse_constant=_no_constant)


def parse_record_line(raw: bytes) -> tuple[Any, str | None, bool]:
    """(value, None, False) of one line's JSON, or (None, why not, cut): not UTF-8 (the writer's own
    surrogatepass bytes are read back as written), not JSON, a number that is not a finite double
    (NaN, 1e400, a 400-digit integer), more than MAX_VALUES values or nested deeper than MAX_DEPTH.
    `cut`: the text may be a record cut short (an object, or a character, that stops at its end)."""
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        cut = exc.reason == "unexpected end of data"  # a character cut at the end of the text
        return None, f"invalid UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}", cut
    if len(text) > _COUNT_VALUES_FROM:
        bare = _STRING.sub('""', text)  # separators and brackets outside strings: about one per value
        values = bare.count(",") + bare.count("[") + bare.count("{")
        del bare
        if values > MAX_VALUES:
            return None, f"about {values:,} values, more than {MAX_VALUES:,} (records hold a few hundred)", False
    try:
        shape = raw.translate(_AS_ZEROS, b"+")
        suspect = _LONG_RUN in shape or _BIG_EXPONENT in shape
        del shape
        value = (_CHECKED if suspect else _PARSER).decode(text)
    except _OutOfRange as exc:
        return None, f"number out of range: {exc} (records hold finite numbers)", False
    except RecursionError:
        return None, "not JSON: nested too deeply for the parser", False
    except json.JSONDecodeError as exc:  # cut short: an object whose text ends before it does
        cut = text.startswith("{") and (exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip()))
        return None, f"not JSON: {exc}", cut
    except ValueError as exc:  # int(): more digits than Python converts
        return None, f"not JSON: {str(exc)[:120]}", False
    if text.count("[") + text.count("{") > MAX_DEPTH and nests_deeper_than(value, MAX_DEPTH):
        return None, f"nested deeper than {MAX_DEPTH} levels (records nest a few)", False
    return value, None, False


_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    return f"refused: {kind}, not a regular file (an outcome log file is a plain file)"


def open_log_file(file: str | Path) -> tuple[Any, str | None]:
    """(binary file object, None), or (None, why not): a file that is not a regular file is refused
    before it is opened (a FIFO would block the open, a device never end), and opened non-blocking
    so that one swapped in between is refused too, never waited on."""
    try:
        problem = _not_regular(os.stat(file).st_mode)
        if problem is not None:
            return None, problem
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return None, f"cannot read: {exc.strerror or exc}"
    problem = _not_regular(os.fstat(fd).st_mode)
    if problem is not None:
        os.close(fd)
        return None, problem
    os.set_blocking(fd, True)  # a regular file: reads never block anyway
    return os.fdopen(fd, "rb"), None


def read_log_lines(folder: str | Path) -> Iterator[LoggedLine]:
    """Every non-blank line of the outcome log in `folder` (its FILE_PATTERN files, in time order), parsed:
    the one reader of the format (data.sdk_logs, drift, make report, make label). A file that cannot be
    opened is one LoggedLine with line 0 and the reason; what a line holds is the caller's to judge."""
    for file in sorted(Path(folder).glob(FILE_PATTERN)):
        fh, problem = open_log_file(file)
        if fh is None:
            yield LoggedLine(str(file), 0, None, problem)
            continue
        with fh:
            number = 0
            while raw := fh.readline(MAX_LINE_BYTES + 1):
                number += 1
                last = not raw.endswith(b"\n")
                if last and len(raw) > MAX_LINE_BYTES:  # longer than the bound: skipped, never held
                    length = len(raw)
                    del raw
                    while rest := fh.readline(_SKIP_BYTES):
                        length += len(rest)
                        if rest.endswith(b"\n"):
                            length -= 1  # the newline is not the line's
                            break
                    problem = f"line longer than {MAX_LINE_BYTES:,} bytes ({length:,} bytes): not read"
                    yield LoggedLine(str(file), number, None, problem, not rest)
                    continue
                if not raw.strip():
                    continue
                record, problem, cut = parse_record_line(raw)
                if problem is not None:
                    yield LoggedLine(str(file), number, None, problem, last, last and cut)
                elif not isinstance(record, dict) or record.get("log") != LOG_FORMAT:
                    yield LoggedLine(str(file), number, None, f"not an outcome record of {LOG_FORMAT}", last)
                else:
                    yield LoggedLine(str(file), number, record, None, last)


# What a reader prints of a logged string (an id, a version, a reason): control characters
# (C0, DEL, C1: ESC starts a terminal's escape sequences), bidi overrides and isolates, line and
# paragraph separators and lone surrogates shown as escapes, so no log field can drive the terminal.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """`text` with what could drive a terminal shown as escapes (\\x1b, \\u202e)."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)
