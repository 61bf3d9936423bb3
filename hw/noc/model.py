"""Reference model of the network-on-chip: what happens to a packet, in plain Python.

It follows ``docs/noc.md``, not the gateware, so that testbenches can check the gateware
against it; the host software and an instruction-level simulator can use it as the
functional model of the network.

Members
-------
head_error
    Why a router drops a head flit (or ``None``).
destinations
    Where a packet is delivered (the tiles of its rectangle, the host, or nowhere).
next_hops
    The outputs a router takes for a packet arriving on a given input (one step of the XY
    tree).
tree
    Every router a packet visits and the outputs it takes there.
"""

from __future__ import annotations

from .packet import DEFAULT, HOST, Head, NocConfig, PacketType
from .router import Dir

__all__ = ["head_error", "destinations", "next_hops", "tree"]


def _type_code(value) -> int:
    return int(value.value) if isinstance(value, PacketType) else int(value)


def head_error(head: Head, last: bool, width: int, height: int,
               cfg: NocConfig = DEFAULT) -> str | None:
    """Return why a router of a ``width`` x ``height`` mesh drops this head, or ``None``.

    ``last`` is the head flit's ``last`` bit (it must be set exactly when ``length == 0``).
    Every router input applies these checks to every head flit; a packet that passes them
    where it enters the mesh passes them everywhere.
    """
    try:
        PacketType(_type_code(head.type))
    except ValueError:
        return f"reserved packet type {_type_code(head.type)}"
    if bool(last) != (head.length == 0):
        return f"length {head.length} inconsistent with last={int(bool(last))} on the head"
    if head.mcast:
        if head.x0 > head.x1 or head.y0 > head.y1:
            return "empty multicast rectangle (x0 > x1 or y0 > y1)"
        if head.x1 >= width or head.y1 >= height:
            return "multicast rectangle outside the mesh"
        if 1 + head.length > cfg.mcast_max_flits:
            return f"multicast packet longer than {cfg.mcast_max_flits} flits"
        return None
    if head.x0 == cfg.host[0]:
        return None if head.y0 == cfg.host[1] else "host address with a non-zero row"
    if head.x0 >= width or head.y0 >= height:
        return "unicast destination outside the mesh"
    return None


def destinations(head: Head, width: int, height: int, cfg: NocConfig = DEFAULT,
                 *, last: bool | None = None) -> list:
    """Return where a packet with this head is delivered in a ``width`` x ``height`` mesh.

    A list of ``(x, y)`` tiles (row-major order) or ``[HOST]``; empty when the packet is
    dropped.  ``last`` (the head's ``last`` bit) defaults to the consistent value.
    """
    if last is None:
        last = head.length == 0
    if head_error(head, last, width, height, cfg) is not None:
        return []
    if not head.mcast and (head.x0, head.y0) == cfg.host:
        return [HOST]
    x0, x1, y0, y1 = head.rect
    return [(x, y) for y in range(y0, y1 + 1) for x in range(x0, x1 + 1)]


def next_hops(head: Head, x: int, y: int, frm: Dir, width: int, height: int,
              cfg: NocConfig = DEFAULT, *, host_port: bool | None = None) -> set[Dir]:
    """Return the outputs router ``(x, y)`` forwards a (valid) head to, arriving on ``frm``.

    One step of XY-tree routing: along the row towards the rectangle's columns (east from
    the west input or the local port, west from the east input or the local port), then
    north/south along each column of the rectangle, and the local port in the rectangle.
    A packet for the host goes to (0, 0) and leaves on its west port.  ``host_port``
    defaults to ``(x, y) == (0, 0)``.  An empty set means the router drops the packet.
    """
    if host_port is None:
        host_port = (x, y) == (0, 0)
    to_host = not head.mcast and head.x0 == cfg.host[0]
    x0, x1, y0, y1 = (0, 0, 0, 0) if to_host else head.rect
    out = set()
    in_col = x0 <= x <= x1
    if frm in (Dir.W, Dir.LOCAL) and x < x1:
        out.add(Dir.E)
    if frm in (Dir.E, Dir.LOCAL) and x > x0:
        out.add(Dir.W)
    if frm != Dir.N and in_col and y > y0:
        out.add(Dir.N)
    if frm != Dir.S and in_col and y < y1:
        out.add(Dir.S)
    if in_col and y0 <= y <= y1:
        if not to_host:
            out.add(Dir.LOCAL)
        elif host_port:
            out.add(Dir.W)
    # Edge ports face nothing.
    if x == width - 1:
        out.discard(Dir.E)
    if x == 0 and not host_port:
        out.discard(Dir.W)
    if y == 0:
        out.discard(Dir.N)
    if y == height - 1:
        out.discard(Dir.S)
    return out


_STEP = {Dir.N: (0, -1, Dir.S), Dir.E: (1, 0, Dir.W), Dir.S: (0, 1, Dir.N),
         Dir.W: (-1, 0, Dir.E)}


def tree(head: Head, src, width: int, height: int,
         cfg: NocConfig = DEFAULT) -> dict[tuple[int, int], set[Dir]]:
    """Return ``{(x, y): outputs}`` for every router a packet from ``src`` visits.

    ``src`` is a tile ``(x, y)`` or :data:`HOST`.  Raises ``RuntimeError`` if the walk
    visits a router twice (which XY-tree routing never does).
    """
    if src == HOST:
        todo = [((0, 0), Dir.W)]
    else:
        todo = [(tuple(src), Dir.LOCAL)]
    visited: dict[tuple[int, int], set[Dir]] = {}
    while todo:
        (x, y), frm = todo.pop()
        if (x, y) in visited:
            raise RuntimeError(f"router ({x}, {y}) visited twice")
        outs = next_hops(head, x, y, frm, width, height, cfg)
        visited[x, y] = outs
        for o in outs:
            if o in _STEP and not (o == Dir.W and (x, y) == (0, 0)):
                dx, dy, arrive = _STEP[o]
                todo.append(((x + dx, y + dy), arrive))
    return visited
