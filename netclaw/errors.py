"""netclaw's exception tree, in one place.

    NetclawError
    ├── ConfigError                 bad or unknown config; message names the key path
    ├── JournalError                the journal could not be read or written
    │   ├── SequenceConflict        append with a stale expected sequence number
    │   ├── LeaseLost               another node owns the session now: the write is fenced
    │   └── JournalCorrupt          a stored event or snapshot cannot be decoded
    ├── ProviderError               an LLM call failed (``code`` is the error output's code)
    │   ├── ContextOverflow         the prompt is larger than the model's window
    │   ├── RateLimited             429; ``retry_after`` seconds if the server said
    │   ├── ProviderUnavailable     5xx, connection or timeout: transient, retried
    │   ├── ProviderAuthError       401/403: fix the key, not a retry
    │   ├── ProviderBadRequest      the request itself was rejected (4xx)
    │   │   └── ModelNotServed      the server is up but lists no such model (``available``)
    │   └── ProviderProtocolError   the answer could not be understood
    ├── ToolError                   a tool failed; becomes an ``is_error`` tool result
    ├── SessionError
    │   ├── IllegalTransition       a phase change the phase machine forbids
    │   ├── SessionUnavailable      the session could not be started or recovered
    │   │   ├── OutcomeUnknown      a write was not confirmed in time; it may still land
    │   │   ├── SessionOwnedElsewhere  another node holds the session's lease
    │   │   └── SessionMoved        the session is leaving this node (a drain, a move):
    │   │                           nothing was done here; its new node takes it
    │   └── ApprovalError           a decision on a tool call could not be taken
    │       ├── ApprovalNotFound    no such pending request (404)
    │       ├── ApprovalClosed      already decided or expired (409)
    │       └── NotAnApprover       this person may not decide (403)
    ├── InvalidInput                an inbound message is wrong; ``field`` names what
    │   └── IdempotencyKeyReused    an identity sent again with a different message
    ├── ApiError                    an HTTP answer other than 2xx: status, code, message
    ├── AdapterError                a channel adapter failed; it is disabled, not the daemon
    ├── DaemonError                 start-up problems (port in use, data_dir locked)
    └── ClientError                 the CLI could not get an answer from the daemon
        └── DaemonNotRunning        nothing listens at the configured address

Third-party exceptions are translated at the boundary with ``raise ... from``.
"""

from __future__ import annotations


class NetclawError(Exception):
    """Base class: everything netclaw raises on purpose."""

    code = "internal"


class ConfigError(NetclawError):
    code = "config_error"


class JournalError(NetclawError):
    code = "journal_error"


class SequenceConflict(JournalError):
    code = "sequence_conflict"

    def __init__(self, persistence_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"journal for {persistence_id!r} is at seq {actual}, append expected {expected}: "
            "another writer appended to this session"
        )
        self.persistence_id = persistence_id
        self.expected = expected
        self.actual = actual


class LeaseLost(JournalError):
    """The session's lease moved to another node (or was never this node's): its writes
    are refused, so two nodes never both extend one session's journal."""

    code = "lease_lost"


class JournalCorrupt(JournalError):
    code = "journal_corrupt"


class ProviderError(NetclawError):
    code = "provider_error"
    retryable = False


class ContextOverflow(ProviderError):
    code = "context_overflow"


class RateLimited(ProviderError):
    code = "rate_limited"
    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderUnavailable(ProviderError):
    code = "provider_unavailable"
    retryable = True


class ProviderAuthError(ProviderError):
    code = "provider_auth"


class ProviderBadRequest(ProviderError):
    code = "provider_bad_request"


class ModelNotServed(ProviderBadRequest):
    """The server answers but does not list the model; ``available`` is what it has."""

    code = "model_not_served"

    def __init__(self, message: str, available: list[str]) -> None:
        super().__init__(message)
        self.available = available


class ProviderProtocolError(ProviderError):
    code = "provider_protocol"


class ToolError(NetclawError):
    code = "tool_error"


class SessionError(NetclawError):
    code = "session_error"


class IllegalTransition(SessionError):
    code = "illegal_transition"


class SessionUnavailable(SessionError):
    code = "session_unavailable"
    retry_after: float | None = None  # seconds until a retry may succeed, when known (HTTP Retry-After)


class OutcomeUnknown(SessionUnavailable):
    """The journal did not confirm a write in time, and it may still land. Retrying
    with the same identity (``Idempotency-Key``) is safe and tells which it was."""

    code = "outcome_unknown"

    def __init__(self, message: str, identity: str | None = None) -> None:
        super().__init__(message)
        self.identity = identity


class SessionOwnedElsewhere(SessionUnavailable):
    """Another node of the cluster holds the session's lease: its input belongs there.
    ``url`` is where that node can be reached (None when it advertises no address)."""

    code = "owned_elsewhere"

    def __init__(self, session_id: str, node_id: str, url: str | None, retry_after: float) -> None:
        where = f" at {url}" if url else ""
        super().__init__(
            f"session {session_id} is resident on node {node_id}{where}; its lease expires in "
            f"{max(retry_after, 0.0):.0f}s if that node is gone"
        )
        self.session_id = session_id
        self.node_id = node_id
        self.url = url
        self.retry_after = retry_after


class SessionMoved(SessionUnavailable):
    """The session is leaving this node (it drains, or the session is moved to another
    node), or this node takes no new sessions: the command was not carried out here, so
    sending it to the session's new node is safe."""

    code = "session_moved"

    def __init__(self, session_id: str, why: str = "it is moving to another node") -> None:
        super().__init__(f"session {session_id} is not taken on this node: {why}")
        self.session_id = session_id


class SubagentRefused(SessionError):
    """A sub-agent was not spawned: not allowed here, or a limit was reached (the message
    says which, and what to do)."""

    code = "subagent_refused"


class ApprovalError(SessionError):
    code = "approval_error"
    status = 400


class ApprovalNotFound(ApprovalError):
    code = "approval_not_found"
    status = 404


class ApprovalClosed(ApprovalError):
    code = "approval_decided"
    status = 409


class QuestionNotFound(ApprovalNotFound):
    """No such open question (a running tool's) in that session."""

    code = "question_not_found"


class QuestionAnswered(ApprovalClosed):
    code = "question_answered"


class NotAnApprover(ApprovalError):
    code = "not_an_approver"
    status = 403


class InvalidInput(NetclawError):
    """The inbound message itself is wrong; ``field`` names what."""

    code = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class IdempotencyKeyReused(InvalidInput):
    """The same identity (``Idempotency-Key``) came with a different message: refusing it
    is the only answer that neither loses the new message nor replays the old one."""

    code = "idempotency_key_reused"

    def __init__(self, message: str) -> None:
        super().__init__("idempotency_key", message)


class ApiError(NetclawError):
    """An HTTP error answer: ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers: dict[str, str] = {}

    def with_header(self, name: str, value: str) -> ApiError:
        self.headers[name] = value
        return self


class NotPermitted(ApiError):
    """The caller's role does not allow this (netclaw/security/roles.py): a 403, or a note in chat."""

    def __init__(self, message: str) -> None:
        super().__init__(403, "forbidden", message)


class AdapterError(NetclawError):
    code = "adapter_error"


class DaemonError(NetclawError):
    code = "daemon_error"


class ClientError(NetclawError):
    code = "client_error"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status  # the daemon's HTTP status, when it answered
        if code is not None:
            self.code = code  # the daemon's error code, when it said one


class DaemonNotRunning(ClientError):
    code = "daemon_not_running"
