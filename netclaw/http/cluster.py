"""The cluster's HTTP face: the middleware that sends a session's API calls to the node
that serves it (:mod:`._routing`), and the routes an operator and the other nodes use.

- ``GET /api/cluster`` — the live nodes (version, protocol, state, sessions).
- ``POST /api/cluster/nodes/{node}/drain`` and ``.../resume`` — any node passes them on
  to the one named.
- ``GET /api/sessions/{id}/owner`` — which node holds the session (answered by any node,
  from the lease row).
- ``POST /api/sessions/{id}/move?to=NODE`` — on the session's owner (forwarded there).
- ``POST /api/cluster/sessions/{id}/take`` — between nodes: the session's lease was
  written over to this node; recover it now.

A forwarded request is served where it lands, never forwarded again by this middleware;
it is refused if written in a protocol this node does not read, and a session that left
this node meanwhile is answered 503 with ``X-Netclaw-Moved`` so the sender looks again.
"""

from __future__ import annotations

from aiohttp import web

from netclaw.cluster import forwarded, protocol, unavailable
from netclaw.cluster.membership import ClusterNode
from netclaw.errors import ApiError, SessionMoved, SessionOwnedElsewhere
from netclaw.gateway import check_session_id
from netclaw.http.web import Handler
from netclaw.persistence import Owner

HERE = "cluster:here"  # a session route answered by whichever node it reaches
VIEW = "cluster:view"  # a session read: its owner answers, else (unreachable) this node


ALONE = (
    "this daemon runs alone: cluster mode is off (nodes form a cluster on a shared "
    'PostgreSQL journal, journal.backend "postgres"; see docs/scale-out.md)'
)


async def _alone(request: web.Request) -> web.StreamResponse:
    raise ApiError(409, "cluster_off", ALONE)


def alone_routes() -> list[web.RouteDef]:
    """On a single node, the cluster's routes say that cluster mode is off (not a bare 404)."""
    return [
        web.get("/api/cluster", _alone),
        web.post("/api/cluster/nodes/{node}/drain", _alone),
        web.post("/api/cluster/nodes/{node}/resume", _alone),
        web.get("/api/sessions/{id}/owner", _alone),
        web.post("/api/sessions/{id}/move", _alone),
    ]


class ClusterHttp:
    def __init__(self, node: ClusterNode) -> None:
        self.node = node
        self.routing = node.routing

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/cluster", self.status),
            web.post("/api/cluster/nodes/{node}/drain", self.drain),
            web.post("/api/cluster/nodes/{node}/resume", self.resume),
            web.get("/api/sessions/{id}/owner", self.owner, name=HERE),
            web.post("/api/sessions/{id}/move", self.move),
            web.post("/api/cluster/sessions/{id}/take", self.take),
        ]

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if forwarded(request):
            why = protocol.problem(request.headers.get(protocol.VERSION))
            if why is not None:
                raise ApiError(400, "protocol_mismatch", why)
            try:
                return await handler(request)
            except SessionMoved as exc:  # nothing was done here: the sender looks again
                raise (
                    ApiError(503, exc.code, str(exc))
                    .with_header(protocol.MOVED, "1")
                    .with_header("Retry-After", "1")
                ) from exc
        session_id = request.match_info.get("id")
        if not request.path.startswith("/api/sessions/") or not session_id:
            return await handler(request)
        route = request.match_info.route.name
        if route == HERE:
            return await handler(request)
        session_id = check_session_id(session_id)

        async def send(owner: Owner) -> web.StreamResponse:
            return await self.routing.forwarder.proxy(request, session_id, owner)

        async def here() -> web.StreamResponse:
            return await handler(request)

        try:
            return await self.routing.route(session_id, send, here, hold=route != VIEW)
        except SessionOwnedElsewhere as exc:  # its node advertises no address: say when to retry
            raise unavailable(str(exc), exc.retry_after or 5.0, exc.code) from exc

    # -- handlers -------------------------------------------------------------------------

    async def status(self, request: web.Request) -> web.Response:
        await self.node.refresh()
        return web.json_response(self.node.status())

    async def drain(self, request: web.Request) -> web.Response:
        return await self._on_node(request, "drain")

    async def resume(self, request: web.Request) -> web.Response:
        return await self._on_node(request, "resume")

    async def _on_node(self, request: web.Request, action: str) -> web.Response:
        name = request.match_info["node"]
        if name == self.node.node_id:
            result = await (self.node.drain(stopping=False) if action == "drain" else self.node.resume())
            return web.json_response(result)
        if forwarded(request):
            raise ApiError(404, "node_not_found", f"this is node {self.node.node_id}, not {name!r}")
        peer = next((p for p in await self.node.refresh() if p.node_id == name), None)
        if peer is None or peer.url is None:
            live = ", ".join(p.node_id for p in self.node.peers) or "none"
            raise ApiError(404, "node_not_found", f"no live node {name!r} (live: {live})")
        status, body = await self.node.forwarder.call(
            f"{peer.url.rstrip('/')}/api/cluster/nodes/{name}/{action}"
        )
        # That node wrote its state to the registry before answering: read it now, so what
        # this node says next (`netclaw status`, routing) already knows it.
        await self.node.refresh()
        return web.json_response(body, status=status)

    async def owner(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        return web.json_response(await self.node.owner(session_id))

    async def move(self, request: web.Request) -> web.Response:
        session_id = check_session_id(request.match_info["id"])
        to = request.query.get("to", "").strip()
        if not to:
            raise ApiError(400, "invalid_to", "name the node to move the session to: ?to=NODE")
        result = await self.node.move_by_request(session_id, to)
        body = {"session_id": session_id, "to": result.to, "moved": result.moved}
        if not result.moved:
            body["note"] = "its turn is still running; it moves when the turn ends"
        return web.json_response(body, status=200 if result.moved else 202)

    async def take(self, request: web.Request) -> web.Response:
        if not forwarded(request):
            raise ApiError(400, "not_forwarded", "this route is for the nodes of a cluster")
        session_id = check_session_id(request.match_info["id"])
        self.node.take(session_id)
        return web.json_response({"session_id": session_id, "node_id": self.node.node_id}, status=202)
