"""bsuite tasks in pure form (registered as ``<Name>-bsuite``, gymnax's ids)."""

from funrl.envs.bsuite.catch import Catch, CatchParams, CatchState
from funrl.envs.bsuite.deep_sea import DeepSea, DeepSeaParams, DeepSeaState
from funrl.envs.bsuite.discounting_chain import (
    DiscountingChain,
    DiscountingChainParams,
    DiscountingChainState,
)
from funrl.envs.bsuite.memory_chain import MemoryChain, MemoryChainParams, MemoryChainState
from funrl.envs.bsuite.umbrella_chain import UmbrellaChain, UmbrellaChainParams, UmbrellaChainState

__all__ = [
    "Catch",
    "CatchParams",
    "CatchState",
    "DeepSea",
    "DeepSeaParams",
    "DeepSeaState",
    "DiscountingChain",
    "DiscountingChainParams",
    "DiscountingChainState",
    "MemoryChain",
    "MemoryChainParams",
    "MemoryChainState",
    "UmbrellaChain",
    "UmbrellaChainParams",
    "UmbrellaChainState",
]
