"""Volumetric ``grid_sample`` (``grid_sampler_3d`` and its backward) as zyx ops.

PyTorch decomposes the 2-d sampler into gathers at the sampling corners; the 3-d one has CPU and
CUDA kernels only. Here it is recorded the same way from ops zyx lowers: the grid's (x, y, z)
coordinates are unnormalized to (W, H, D) positions and padded (zeros, border, reflection) as
ATen's ``grid_sampler_compute_source_index``; trilinear mode sums the 8 corner values of each
cell weighted by the opposite sub-volumes, nearest mode takes the corner at the rounded position
(half to even, as ATen's ``nearbyint``). A corner outside the volume adds nothing (its value is
not read into the sum, so a NaN there does not leak in). Half inputs are computed in float32 and
rounded once. The backward is autograd's gradient of this recording (derived_backward.py).
"""

from __future__ import annotations

import torch

from ..derived_backward import derived_gradients
from ..registry import aten, register

_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _reflect(coords: torch.Tensor, twice_low: int, twice_high: int) -> torch.Tensor:
    """``coords`` reflected about the bounds until they fall between them (the bounds are passed
    doubled, so that half-integers stay integers), as ATen's ``reflect_coordinates``."""
    if twice_low == twice_high:
        return torch.zeros_like(coords)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    distance = (coords - low).abs()
    extra = torch.fmod(distance, span)
    flips = torch.floor(distance / span)
    even = torch.fmod(flips, 2) == 0
    return torch.where(even, extra + low, span - extra + low)


def _source_index(coords: torch.Tensor, size: int, padding_mode: int, align_corners: bool) -> torch.Tensor:
    """Grid coordinates in [-1, 1] as positions along an axis of ``size`` voxels, padded."""
    if align_corners:
        coords = (coords + 1) / 2 * (size - 1)
    else:
        coords = ((coords + 1) * size - 1) / 2
    if padding_mode == _BORDER:
        return coords.clamp(0, size - 1)
    if padding_mode == _REFLECTION:
        if align_corners:
            coords = _reflect(coords, 0, 2 * (size - 1))
        else:
            coords = _reflect(coords, -1, 2 * size - 1)
        return coords.clamp(0, size - 1)
    return coords


def _sample(volume: torch.Tensor, positions: list[torch.Tensor], weight) -> torch.Tensor:
    """``volume`` (N, C, D, H, W) at integral ``positions`` (z, y, x; each N, 1, oD, oH, oW) times
    ``weight``, or 0 where a position lies outside the volume."""
    n, c = volume.shape[:2]
    inside = None
    indices = []
    for position, size in zip(positions, volume.shape[2:]):
        within = (position >= 0) & (position < size)
        inside = within if inside is None else inside & within
    for position in positions:
        indices.append(torch.where(inside, position, 0).to(torch.int64))
    batch = torch.arange(n, device=volume.device).view(n, 1, 1, 1, 1)
    channel = torch.arange(c, device=volume.device).view(1, c, 1, 1, 1)
    values = volume[batch, channel, indices[0], indices[1], indices[2]]
    return torch.where(inside, values * weight, 0)


def grid_sample_3d(volume: torch.Tensor, grid: torch.Tensor, interpolation_mode: int, padding_mode: int,
                   align_corners: bool) -> torch.Tensor:
    """``grid_sampler_3d`` recorded as zyx ops (checked by ATen's meta kernel first)."""
    torch.ops.aten.grid_sampler_3d(torch.empty(volume.shape, dtype=volume.dtype, device="meta"),
                                   torch.empty(grid.shape, dtype=grid.dtype, device="meta"),
                                   interpolation_mode, padding_mode, align_corners)
    dtype = volume.dtype
    if dtype in (torch.float16, torch.bfloat16):
        volume, grid = volume.float(), grid.float()
    depth, height, width = volume.shape[2:]
    grid = grid.unsqueeze(1)  # (N, 1, oD, oH, oW, 3): broadcast over channels
    ix = _source_index(grid[..., 0], width, padding_mode, align_corners)
    iy = _source_index(grid[..., 1], height, padding_mode, align_corners)
    iz = _source_index(grid[..., 2], depth, padding_mode, align_corners)
    if interpolation_mode == 1:  # nearest
        result = _sample(volume, [iz.round(), iy.round(), ix.round()], 1)
    else:  # trilinear: each corner weighted by the sub-volume opposite it
        low = [iz.floor(), iy.floor(), ix.floor()]
        coords = [iz, iy, ix]
        result = None
        for corner in range(8):
            positions, weight = [], None
            for axis in range(3):
                upper = (corner >> (2 - axis)) & 1
                position = low[axis] + upper
                share = coords[axis] - low[axis] if upper else low[axis] + 1 - coords[axis]
                positions.append(position)
                weight = share if weight is None else weight * share
            term = _sample(volume, positions, weight)
            result = term if result is None else result + term
    return result.to(dtype)


@register(aten.grid_sampler_3d.default)
def grid_sampler_3d(volume, grid, interpolation_mode, padding_mode, align_corners):
    return grid_sample_3d(volume, grid, interpolation_mode, padding_mode, align_corners)


@register(aten.grid_sampler_3d_backward.default)
def grid_sampler_3d_backward(grad_output, volume, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    """(grad_input, grad_grid): autograd's gradient of the recording above."""
    return derived_gradients(grid_sample_3d, [volume, grid, interpolation_mode, padding_mode, align_corners],
                             [0, 1], grad_output, [bool(output_mask[0]), bool(output_mask[1])])
