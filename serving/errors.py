"""Every exception the SDK raises, in one place: `except serving.errors.RouterError` catches them all.

Each class stays in the module that raises it and is importable from there, from its package
(`serving`, `serving.chat`, `serving.policy`, `serving.dashboard`) and from here. Each also keeps
the standard base code caught before RouterError existed, given in brackets: a bad file or input
is a ValueError, a failure while running a RuntimeError, an unreachable or slow upstream a
ConnectionError or TimeoutError. A wrong argument (a non-str prompt, an unknown precision) is
Python's own TypeError or ValueError, not a RouterError.

    RouterError
    │   importable from `serving`:
    ├── BundleError [RuntimeError]              a bundle missing, tampered or invalid (Router.load(strict=True))
    ├── ManifestError [ValueError]              a manifest value is wrong (a BundleError when a bundle loads)
    ├── SigningError [ValueError]               a public key or a bundle's signature is bad
    ├── DownloadError [RuntimeError]            a bundle could not be fetched (BundleURLWatcher)
    ├── EndpointSpecError [ValueError]          an endpoint spec that cannot be used
    ├── LanguageDetectorMissing [RuntimeError]  endpoints declare languages; the `languages` extra is missing
    ├── CloudCallError [RuntimeError]           the cloud failed, after any fallback (.edge_error, .steps)
    │   └── EndpointsFailed                     no endpoint of an N-endpoint cascade served (.tried)
    ├── EdgeBusy [RuntimeError]                 no edge worker came free (execute() falls back to the cloud)
    ├── RecordError [ValueError]                an outcome record the log does not write
    │   └── UndeclaredText                      a string where STRING_FIELDS declares none
    ├── DriftInputError [ValueError]            records or a drift reference drift_report cannot read
    │   from `serving.policy`:
    ├── PolicyError [RuntimeError]              a request the policy leaves no way to serve (.rules)
    │   ├── NoFeasibleEndpoint                  the rules or the request's needs leave no endpoint
    │   └── FallbackForbidden                   the allowed endpoint failed and a rule forbids the rest
    ├── PolicyFileError [ValueError]            a policy file that cannot be used
    │   from `serving.chat` (what each means for the fallback: docs/clients.md):
    ├── UpstreamError                           an endpoint gave no usable answer (.endpoint)
    │   ├── UpstreamUnreachable [ConnectionError]
    │   ├── UpstreamTimeout [TimeoutError]
    │   │   └── SlowFirstToken
    │   ├── UpstreamHTTPError                   an HTTP error status (.status, .detail)
    │   ├── UpstreamMalformed
    │   └── StreamInterrupted
    │   from `serving.dashboard`:
    ├── RecordShapeError [ValueError]           a record the dashboard cannot read
    │   from `serving.proxy.config` and `serving.proxy.app` (the `server` extra):
    ├── ConfigError [ValueError]                a proxy option is missing or wrong
    └── RequestError                            a request the proxy answers with an HTTP error (kept inside)

RouterError itself lives in serving/router_error.py, a module importing nothing, which every
module above imports; this one loads the others only when one of their names is asked for, so
`import serving.errors` stays as light as `import serving` (RequestError's module needs the `server` extra).
tests/test_sdk_face.py checks that every exception class in serving/ is a RouterError and is here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from serving.router_error import RouterError

if TYPE_CHECKING:
    from serving.bundle import BundleError
    from serving.bundle_download import DownloadError
    from serving.chat.errors import (
        SlowFirstToken,
        StreamInterrupted,
        UpstreamError,
        UpstreamHTTPError,
        UpstreamMalformed,
        UpstreamTimeout,
        UpstreamUnreachable,
    )
    from serving.dashboard.summary import RecordShapeError
    from serving.drift import DriftInputError
    from serving.endpoints import EndpointSpecError
    from serving.execution import CloudCallError, EdgeBusy, EndpointsFailed
    from serving.language import LanguageDetectorMissing
    from serving.manifest import ManifestError
    from serving.outcome_log import RecordError, UndeclaredText
    from serving.policy.errors import FallbackForbidden, NoFeasibleEndpoint, PolicyError
    from serving.policy.rules import PolicyFileError
    from serving.proxy.app import RequestError
    from serving.proxy.config import ConfigError
    from serving.signing import SigningError

# Each name's defining module, imported on first use.
_HOMES = {
    "BundleError": "serving.bundle",
    "CloudCallError": "serving.execution",
    "ConfigError": "serving.proxy.config",
    "DownloadError": "serving.bundle_download",
    "DriftInputError": "serving.drift",
    "EdgeBusy": "serving.execution",
    "EndpointSpecError": "serving.endpoints",
    "EndpointsFailed": "serving.execution",
    "FallbackForbidden": "serving.policy.errors",
    "LanguageDetectorMissing": "serving.language",
    "ManifestError": "serving.manifest",
    "NoFeasibleEndpoint": "serving.policy.errors",
    "PolicyError": "serving.policy.errors",
    "PolicyFileError": "serving.policy.rules",
    "RecordError": "serving.outcome_log",
    "RecordShapeError": "serving.dashboard.summary",
    "RequestError": "serving.proxy.app",
    "SigningError": "serving.signing",
    "SlowFirstToken": "serving.chat.errors",
    "StreamInterrupted": "serving.chat.errors",
    "UndeclaredText": "serving.outcome_log",
    "UpstreamError": "serving.chat.errors",
    "UpstreamHTTPError": "serving.chat.errors",
    "UpstreamMalformed": "serving.chat.errors",
    "UpstreamTimeout": "serving.chat.errors",
    "UpstreamUnreachable": "serving.chat.errors",
}

__all__ = [
    "BundleError",
    "CloudCallError",
    "ConfigError",
    "DownloadError",
    "DriftInputError",
    "EdgeBusy",
    "EndpointSpecError",
    "EndpointsFailed",
    "FallbackForbidden",
    "LanguageDetectorMissing",
    "ManifestError",
    "NoFeasibleEndpoint",
    "PolicyError",
    "PolicyFileError",
    "RecordError",
    "RecordShapeError",
    "RequestError",
    "RouterError",
    "SigningError",
    "SlowFirstToken",
    "StreamInterrupted",
    "UndeclaredText",
    "UpstreamError",
    "UpstreamHTTPError",
    "UpstreamMalformed",
    "UpstreamTimeout",
    "UpstreamUnreachable",
]


def __getattr__(name: str) -> type[RouterError]:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found: type[RouterError] = getattr(importlib.import_module(home), name)
    globals()[name] = found  # the next lookup does not come here
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
