"""Type names for parsed JSON, shared by the SDK's annotations; imported under `if TYPE_CHECKING:`
only, so it adds nothing to `import serving`."""

from typing import Any, Dict

# A decoded JSON object (a manifest, a training run's section, a chat completion, a log record): its
# values are arbitrary JSON, checked at run time where the SDK reads them, so `Any` is their honest type.
JSONObject = Dict[str, Any]
