"""The one error hierarchy of rocke-aot.

Every library error derives from :class:`RockeError`. Each surface translates
them in exactly one place: the CLI (``rocke_aot.cli.main``) maps them to
``click`` exceptions and exit codes, the service maps them to HTTP statuses.

    RockeError
    ├── LaneError (ValueError)          unknown lane, unqualified LLVM major, bad type
    ├── SpecError (ValueError)          malformed spec or problem
    │   ├── FamilyMixError              a select across families of different operations or problem types
    │   ├── LaunchContractError         a launch contract other than the family's formulas give
    │   └── SettingError                an unregistered or malformed ROCKE_AOT_* variable
    ├── CapabilityError                 an op needs a lane/capability/arch the target lacks
    ├── AdmissionError                  a variant table refuses (family, arch, lane) on purpose
    ├── PluginError                     a family plugin (entry point) that cannot be used: names the
    │                                   entry point and its distribution; every other family works
    ├── ToolchainError                  a toolchain is missing, broken or refused
    │   ├── ToolchainRefused            detected, but not qualified (e.g. LLVM 15 COMGR)
    ├── CompileError                    LLVM/linker failed; carries the tool's message
    │   └── CompileTimeout
    ├── CodeObjectError                 a code object fails validation
    ├── RuntimeUnavailable              no GPU runtime or device here (a named skip)
    ├── TrustError                      signed metadata (trust/) refused; nothing is stored
    │   ├── TrustConfigError            no pinned root key (and not insecure), a bad key file
    │   ├── SignatureError              unsigned, badly signed, under the role's threshold
    │   │   └── UnlistedKeyError        signed by a key root.json does not list for the role
    │   ├── ExpiredError                metadata past its "expires"
    │   ├── RollbackError               a version older than one this host has seen
    │   ├── NotInManifestError          a kernel key the signed manifest does not list (also NotFoundError)
    │   ├── BlobMismatchError           bytes whose sha256/size differ from the signed ones (also IntegrityError)
    │   └── MixedGenerationError        metadata of different generations combined (an index
    │                                   naming another manifest, two manifests of one version)
    ├── ServiceError                    the artifact service's own refusals (status = HTTP code)
    │   ├── Unauthorized (401)          a publish without the server's bearer token
    │   ├── ReadOnly (403)              publishing is off (no token configured)
    │   ├── Conflict (409)              the key already holds other bytes
    │   └── TooLarge (413)              a request body over the limit
    └── CacheError
        ├── NotFoundError (KeyError)
        ├── IntegrityError              a blob's sha256 does not match
        ├── KeyConflictError            a key already holds other bytes (a build that is not
        │                               deterministic, a key missing an input, a publish race)
        ├── SchemaVersionError
        ├── ReadOnlyError               a write asked of a store opened read-only
        ├── BundleError                 a malformed or tampered export bundle
        ├── CacheAccessError            the store cannot be opened, reached or written (bad
        │                               URL, missing directory, read-only file, full disk,
        │                               unreachable server)
        └── SourceError                 a server or mirror answered other than asked (client/sources.py)
            ├── RemoteError             an error status the client has no better name for
            ├── RedirectError           a 3xx: redirects are never followed
            ├── DeadlineError           one call ran past its overall deadline
            ├── AnswerTooLargeError     an answer over its size bound (also IntegrityError)
            ├── MalformedAnswerError    a document that is not JSON, compressed, or lacks a field (also IntegrityError)
            └── AnswerMismatchError     an answer to another question (arch, family, lane, key)
"""

from __future__ import annotations


class RockeError(Exception):
    """Base of every rocke-aot error."""


class LaneError(RockeError, ValueError):
    """An unknown or unqualified compiler lane, or an LLVM major with no lane."""


class SpecError(RockeError, ValueError):
    """A malformed spec, knob or problem."""


class FamilyMixError(SpecError):
    """A select across families that do not compute the same operation on the same problem type
    (variants/families.py families_for_select): their candidates cannot be ranked against each other."""


class LaunchContractError(SpecError):
    """A launch contract that disagrees with its family's own formulas (variants/contract.py): a grid,
    a buffer size, a block or an argument other than the family computes for that spec."""


class SettingError(SpecError):
    """A ROCKE_AOT_* variable nobody registered, or a malformed value (rocke_aot/settings.py).
    A SpecError: bad input from the user's environment (exit 2 on the CLI)."""


class CapabilityError(RockeError):
    """An operation needs a capability, minimum lane or arch feature the target lacks."""


class AdmissionError(RockeError):
    """A variant table refuses this (family, arch, lane) on purpose; ``reason`` says why."""

    def __init__(self, message: str, reason: str | None = None):
        super().__init__(message)
        self.reason = reason or message


class PluginError(RockeError):
    """A family plugin cannot be used: its module does not import, its entry point is not a
    Family, its grid refuses without a reason, its lowerer raises or returns something else.

    The message names the plugin (entry point name) and its distribution; ``plugin``,
    ``distribution`` and ``family`` carry them for callers that report (``rocke-aot families``).
    Only that plugin's family is affected: every other family keeps working.
    """

    def __init__(self, message: str, *, plugin: str = "", distribution: str = "", family: str = ""):
        super().__init__(message)
        self.plugin = plugin
        self.distribution = distribution
        self.family = family


class ToolchainError(RockeError):
    """A toolchain is missing or unusable."""


class ToolchainRefused(ToolchainError):
    """A real toolchain was found but is not qualified for any lane."""



class CompileError(RockeError):
    """Code generation or linking failed. ``log`` holds the tool's own message."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class CompileTimeout(CompileError):
    """A compile exceeded its time limit and its worker was killed."""


class CodeObjectError(RockeError):
    """A code object does not match its arch, or is malformed."""


class CacheError(RockeError):
    """Base of cache errors."""


class NotFoundError(CacheError, KeyError):
    """No artifact (or blob) under this key."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "not found"


class IntegrityError(CacheError):
    """A stored blob does not hash to its recorded sha256; its bytes are never returned."""


class KeyConflictError(CacheError):
    """The key already holds another code object: nothing is overwritten (the service answers 409)."""


class SchemaVersionError(CacheError):
    """The store's schema version is not the one this code knows."""


class ReadOnlyError(CacheError):
    """A write (put, gc, ref move, ...) on a store opened with ``readonly=True``."""


class BundleError(CacheError):
    """An export bundle is malformed, or a blob in it does not match its manifest."""


class KpackError(BundleError):
    """A kpack archive (RFC0008), its rocke.aot.bundle/v1 manifest or a device wheel is malformed,
    tampered, or does not match what it claims (cache/kpack.py, client/device_kernels.py)."""


class RuntimeUnavailable(RockeError):
    """No GPU runtime (binding, driver library) or no device on this host: a named skip."""


class NotServedError(RockeError):
    """rocke_aot.torch under the strict policy: a call no prebuilt kernel serves (no candidate in
    the cache, or an argument no family takes); the message names the problem and, where a build
    would serve it, the `rocke-aot build` command."""


class CacheAccessError(CacheError):
    """The store cannot be opened, reached or written: an unknown URL scheme, a directory that
    does not exist, a read-only file, a full disk, an unreachable or refusing server."""


# The service's refusals live here, not in service/errors.py, so that a client can name them
# without importing the server (FastAPI) that answers them.
class ServiceError(RockeError):
    """A refusal of the artifact service; ``status`` is its HTTP code."""

    status = 500


class Unauthorized(ServiceError):
    """A publish without the server's bearer token."""

    status = 401


class ReadOnly(ServiceError):
    """Publishing is off: the server has no token configured."""

    status = 403


class Conflict(ServiceError):
    """The key already holds other bytes."""

    status = 409


class TooLarge(ServiceError):
    """A request body over the limit."""

    status = 413


class TrustError(RockeError):
    """Signed metadata or the bytes it vouches for were refused; nothing refused is stored."""


class TrustConfigError(TrustError):
    """The trust configuration is missing or unusable: no pinned root key and no explicit
    insecure setting, a key file that does not parse, a key of another type."""


class SignatureError(TrustError):
    """Metadata that is unsigned, badly signed, or signed by fewer keys than its role's threshold."""


class UnlistedKeyError(SignatureError):
    """Metadata signed by a key that root.json does not list for that role (unknown or revoked)."""


class ExpiredError(TrustError):
    """Metadata whose "expires" is in the past."""


class RollbackError(TrustError):
    """Metadata older (a lower version) than what this host has already accepted."""


class NotInManifestError(TrustError, NotFoundError):
    """A kernel key that the signed manifest does not list: no source can make it trusted."""


class BlobMismatchError(TrustError, IntegrityError):
    """Bytes whose sha256 or size differ from what the signed manifest says."""


class MixedGenerationError(TrustError):
    """Pieces of different generations put together: an index naming another manifest, two
    different manifests under one version, a kernel of a generation its manifest does not list."""


# The clients' refusals of what a server or mirror answered (client/sources.py raises them;
# service/client.py and runner/bench.py too). Nothing refused is stored or returned.
class SourceError(CacheError):
    """A source (a server, a mirror) answered something other than what was asked for."""


class RemoteError(SourceError):
    """The server answered an error status the client has no better name for."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class RedirectError(SourceError):
    """A 3xx answer: the clients never follow redirects (the URL a host trusts is the one it
    was given), so a redirect is refused, naming the URL asked and where it pointed."""


class DeadlineError(SourceError):
    """One call (retries and backoff included) did not complete within its overall deadline:
    a server that trickles bytes cannot keep a fetch alive beyond it."""


class AnswerTooLargeError(SourceError, IntegrityError):
    """An answer larger than its bound (announced or sent); reading stopped at the bound."""


class MalformedAnswerError(SourceError, IntegrityError):
    """A server document that is not JSON, arrives compressed when identity was asked for,
    lacks a field, has one of the wrong type, or a value that cannot be used (a sha256 that is
    not 64 hex digits)."""


class AnswerMismatchError(SourceError):
    """An answer to another question: a candidate for an arch the target cannot run, another
    family or lane than asked, a record of another key, launch metadata the code object
    contradicts."""
