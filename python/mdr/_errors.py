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
        s = self.status
        return STATUS_NAMES[s] if s is not None and 0 <= s < len(STATUS_NAMES) else str(s)


class InvalidArgumentError(Error, ValueError, TypeError):
    status = INVALID_ARGUMENT


class OutOfRangeError(Error, ValueError):
    status = OUT_OF_RANGE


class SizeOverflowError(Error, OverflowError):
    status = OVERFLOW


class OutOfMemoryError(Error, MemoryError):
    status = OUT_OF_MEMORY


class NoDeviceError(Error):
    status = NO_DEVICE


class BackendError(Error):
    status = BACKEND


class CaptureError(Error):
    status = CAPTURE


class UnsupportedError(Error):
    status = UNSUPPORTED


class StateError(Error):
    status = STATE


class ClosedError(StateError):
    """The object (or one it depends on) was closed."""


_BY_STATUS = {INVALID_ARGUMENT: InvalidArgumentError, OUT_OF_RANGE: OutOfRangeError,
              OVERFLOW: SizeOverflowError, OUT_OF_MEMORY: OutOfMemoryError,
              NO_DEVICE: NoDeviceError, BACKEND: BackendError, CAPTURE: CaptureError,
              UNSUPPORTED: UnsupportedError, STATE: StateError}


def error_for(status, text="", call=None):
    cls = _BY_STATUS.get(int(status))
    if cls is None:
        return Error(text, call, status=int(status))
    return cls(text, call)
