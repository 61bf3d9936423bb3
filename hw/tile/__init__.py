"""The compute tile (issue 4): SRAM, matrix unit, KV store; see ``docs/tile.md``.

Members
-------
sram
    :class:`Sram`, :class:`SramArbiter`, the port signatures.
matrix
    :class:`MatrixUnit` and its command / result formats.
kvstore
    :class:`KvStore`, :class:`KvLayout` and the KV command format.
datapath
    :class:`TileDatapath`: the three wired together, and :class:`TileConfig`.
controller, tile
    :class:`Controller`; :class:`TileCore` and :class:`Tile`, the whole tile (the vector unit
    and the network interface are in ``vector`` and ``netif``).
"""

from .controller import Controller
from .datapath import TileConfig, TileDatapath
from .kvstore import KvCommand, KvError, KvLayout, KvOp, KvParams, KvStore
from .matrix import ACC_WIDTH, K_LIMIT, MatrixCommand, MatrixError, MatrixUnit, matrix_result_layout
from .sram import ADDR_WIDTH, Sram, SramArbiter, SramReadSignature, SramSignature
from .tile import Tile, TileCore

__all__ = [
    "ACC_WIDTH", "ADDR_WIDTH", "K_LIMIT",
    "KvCommand", "KvError", "KvLayout", "KvOp", "KvParams", "KvStore",
    "MatrixCommand", "MatrixError", "MatrixUnit", "matrix_result_layout",
    "Sram", "SramArbiter", "SramReadSignature", "SramSignature",
    "TileConfig", "TileDatapath", "Controller", "TileCore", "Tile",
]
