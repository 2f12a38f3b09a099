"""The particle world of the Multi-Particle Environments: contact forces and integration.

Lowe et al., "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive Environments" (2017);
the reference is mpe2's ``World`` (``mpe2/_mpe_utils/core.py``). Entities are discs in the plane,
agents first and then landmarks: ``pos``/``vel`` are ``[E, 2]``. One world step

1. sums the forces: each movable agent's action force ``u`` plus a soft contact force between
   every pair of colliding entities, ``c * (p_a - p_b) / d * k * log(1 + exp(-(d - r_a - r_b) / k))``
   (``c = contact_force``, ``k = contact_margin``);
2. integrates every movable entity: ``p += v * dt`` (with the old velocity), then
   ``v = v * (1 - damping) + f / m * dt``, then caps the speed at ``max_speed``.

Immovable entities (landmarks, mpe2's speaker) keep their position and velocity.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Bodies", "contact_forces", "integrate", "world_step"]


class Bodies(NamedTuple):
    """Static properties of the ``E`` entities (one value each, agents then landmarks)."""

    size: torch.Tensor  # [E] radius
    mass: torch.Tensor  # [E]
    movable: torch.Tensor  # [E] bool
    collide: torch.Tensor  # [E] bool
    max_speed: torch.Tensor  # [E], inf where unlimited


def contact_forces(
    pos: torch.Tensor, bodies: Bodies, contact_force: float, contact_margin: float
) -> torch.Tensor:
    """``[..., E, 2]``: the sum over colliding partners ``b`` of the contact force ``b`` exerts on
    each entity ``a`` (mpe2's ``get_collision_force``; zero for entities that do not collide)."""
    delta = pos.unsqueeze(-2) - pos.unsqueeze(-3)  # [..., a, b, 2] = p_a - p_b
    eye = torch.eye(pos.shape[-2], dtype=torch.bool, device=pos.device)
    pair = bodies.collide.unsqueeze(1) & bodies.collide.unsqueeze(0) & ~eye
    # The distance of an entity to itself is 0; 1 there keeps 0/0 out of the masked entries.
    dist = torch.where(pair, delta.square().sum(-1).sqrt(), 1.0)
    dist_min = bodies.size.unsqueeze(1) + bodies.size.unsqueeze(0)
    k = contact_margin
    penetration = torch.logaddexp(torch.zeros_like(dist), -(dist - dist_min) / k) * k
    force = contact_force * delta / dist.unsqueeze(-1) * penetration.unsqueeze(-1)
    return torch.where(pair.unsqueeze(-1), force, 0.0).sum(-2)


def integrate(
    pos: torch.Tensor, vel: torch.Tensor, force: torch.Tensor, bodies: Bodies, dt: float, damping: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One semi-explicit Euler step with damping and a speed cap (mpe2's ``integrate_state``)."""
    new_pos = pos + vel * dt
    new_vel = vel * (1 - damping) + force / bodies.mass.unsqueeze(-1) * dt
    speed = new_vel.square().sum(-1, keepdim=True).sqrt()
    max_speed = bodies.max_speed.unsqueeze(-1)
    new_vel = torch.where(speed > max_speed, new_vel / speed * max_speed, new_vel)
    movable = bodies.movable.unsqueeze(-1)
    return torch.where(movable, new_pos, pos), torch.where(movable, new_vel, vel)


def world_step(
    pos: torch.Tensor,
    vel: torch.Tensor,
    action_force: torch.Tensor,
    bodies: Bodies,
    dt: float,
    damping: float,
    contact_force: float,
    contact_margin: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions and velocities ``[..., E, 2]`` after one step; ``action_force`` is ``[..., A, 2]``
    for the agents."""
    batch, num_agents = action_force.shape[:-2], action_force.shape[-2]
    landmarks_force = action_force.new_zeros(*batch, pos.shape[-2] - num_agents, 2)
    force = torch.cat([action_force, landmarks_force], -2) + contact_forces(
        pos, bodies, contact_force, contact_margin
    )
    return integrate(pos, vel, force, bodies, dt, damping)
