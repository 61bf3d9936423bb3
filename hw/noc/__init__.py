"""Network-on-chip of the chipotle accelerator (``chipotle.hw.noc``).

A 2-D mesh of 5-port wormhole routers with dimension-order (XY) routing, round-robin
arbitration, valid/ready back-pressure and multicast to rectangles of tiles; the host link
enters at the west port of router (0, 0).  ``docs/noc.md`` documents the packet format,
routing, flow control, deadlock freedom, error handling and measured figures.

Members
-------
NocConfig, PacketType, Head, Packet, HOST
    Packet format (:mod:`.packet`).
encode_head, decode_head, build_packet, pack_flit, unpack_flit
    Conversions between Python values and flit bit patterns.
destinations, head_error, next_hops, tree
    Reference model of delivery (:mod:`.model`).
Dir, Link, Router
    The router (:mod:`.router`).
Mesh
    The mesh generator (:mod:`.mesh`).
"""

from .mesh import Mesh
from .model import destinations, head_error, next_hops, tree
from .packet import (
    HOST,
    Head,
    NocConfig,
    Packet,
    PacketType,
    build_packet,
    decode_head,
    encode_head,
    pack_flit,
    unpack_flit,
)
from .router import Dir, Link, Router

__all__ = [
    "HOST", "Head", "NocConfig", "Packet", "PacketType",
    "build_packet", "decode_head", "encode_head", "pack_flit", "unpack_flit",
    "destinations", "head_error", "next_hops", "tree",
    "Dir", "Link", "Router", "Mesh",
]
