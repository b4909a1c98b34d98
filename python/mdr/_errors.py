"""mdr.Error and a subclass per mdr_status (include/mdr/status.h)."""
from . import _lib

OK = 0
INVALID_ARGUMENT = 1
OUT_OF_RANGE = 2
OVERFLOW = 3
OUT_OF_MEMORY = 4
NO_DEVICE = 5
BACKEND = 6
CAPTURE = 7
UNSUPPORTED = 8
STATE = 9

STATUS_NAMES = ("OK", "INVALID_ARGUMENT", "OUT_OF_RANGE", "OVERFLOW", "OUT_OF_MEMORY",
                "NO_DEVICE", "BACKEND", "CAPTURE", "UNSUPPORTED", "STATE")


def status_string(status):
    """The text of an mdr_status (an int), as mdr_status_string gives it."""
    s = _lib.lib.mdr_status_string(int(status))
    return s.decode() if s else "unknown status"


class Error(Exception):
    """A call into mdr failed. `.status` is the mdr_status (an int; see
    mdr.STATUS_NAMES), `.text` the backend's last error for that failure
    (or the reason the Python layer refused the call), `.call` the C
    function (or Python method) that failed."""

    status = None  # set by each subclass

    def __init__(self, text="", call=None, status=None):
        if status is not None:
            self.status = status
        self.text = text or ""
        self.call = call
        msg = "%s%s" % ("%s: " % call if call else "", status_string(self.status))
        if self.text:
            msg += " [%s]" % self.text
        super().__init__(msg)

    @property
    def status_name(self):
        """The status's name ("INVALID_ARGUMENT", ...; mdr.STATUS_NAMES)."""
        s = self.status
        return STATUS_NAMES[s] if s is not None and 0 <= s < len(STATUS_NAMES) else str(s)


class InvalidArgumentError(Error, ValueError, TypeError):
    """MDR_ERR_INVALID_ARGUMENT: an argument mdr refuses (the text names it)."""
    status = INVALID_ARGUMENT


class OutOfRangeError(Error, ValueError):
    """MDR_ERR_OUT_OF_RANGE: a count past its limit (tokens past
    max_batch_tokens, sequences past max_sequences, ...)."""
    status = OUT_OF_RANGE


class SizeOverflowError(Error, OverflowError):
    """MDR_ERR_OVERFLOW: a size computation overflowed size_t."""
    status = OVERFLOW


class OutOfMemoryError(Error, MemoryError):
    """MDR_ERR_OUT_OF_MEMORY: an allocation failed (host or device)."""
    status = OUT_OF_MEMORY


class NoDeviceError(Error):
    """MDR_ERR_NO_DEVICE: no CUDA driver, or no such device."""
    status = NO_DEVICE


class BackendError(Error):
    """MDR_ERR_BACKEND: the backend (CUDA, NCCL) failed; the text has its
    own error."""
    status = BACKEND


class CaptureError(Error):
    """MDR_ERR_CAPTURE: a stream capture or a graph instantiation failed (a
    body's failure included; the text names it)."""
    status = CAPTURE


class UnsupportedError(Error):
    """MDR_ERR_UNSUPPORTED: the backend or build lacks what the call needs."""
    status = UNSUPPORTED


class StateError(Error):
    """MDR_ERR_STATE: the call is not valid in the object's current state (a
    cache's step called from its own body or from a second thread, an
    aborted communicator, ...)."""
    status = STATE


class ClosedError(StateError):
    """The object (or one it depends on) was closed."""


_BY_STATUS = {INVALID_ARGUMENT: InvalidArgumentError, OUT_OF_RANGE: OutOfRangeError,
              OVERFLOW: SizeOverflowError, OUT_OF_MEMORY: OutOfMemoryError,
              NO_DEVICE: NoDeviceError, BACKEND: BackendError, CAPTURE: CaptureError,
              UNSUPPORTED: UnsupportedError, STATE: StateError}


def error_for(status, text="", call=None):
    """The Error subclass instance for `status`, with `text` and `call`."""
    cls = _BY_STATUS.get(int(status))
    if cls is None:
        return Error(text, call, status=int(status))
    return cls(text, call)
