"""State tokens: the core tile seen before each slice is placed (DESIGN §4.4).

Tile cell (row = NUMA node, column = the worker's rank in its node) channels:
  0 occupancy   slices already placed on the core, in units of the fair share N / workers
  1 eligibility 1 where a worker exists (the position channel)
  2.. features  sum of the normalised features of slices already placed on the core
Slice t's own counters are never in state t (exclusive cumulative sums), which is what the leakage
guard tests check. Training builds all N tiles at once; rollout updates one running tile.
"""

from __future__ import annotations

import torch

from pmoss.contracts.errors import PmossError
from pmoss.contracts.machine import Machine


def tile_cells(machine: Machine, cols: int) -> list[int]:
    """Tile cell index of each worker action index (row * cols + column)."""
    cells = [r * cols + c for r, c in machine.tile_position]
    assert max(c for _, c in machine.tile_position) < cols, f"{machine.name} does not fit a tile of {cols} columns"
    return cells


def eligibility(machine: Machine, rows: int, cols: int) -> torch.Tensor:
    if machine.numa_nodes > rows or max(len(w) for w in machine.workers_by_node) > cols:
        raise PmossError(f"{machine.name}: {machine.numa_nodes} nodes x {max(len(w) for w in machine.workers_by_node)} workers does not fit "
                         f"the model's {rows}x{cols} core tile; train on a dataset built with `pmoss dataset build --min-tile-rows/--min-tile-cols`")  # fmt: skip
    e = torch.zeros(rows * cols, dtype=torch.bool)
    e[tile_cells(machine, cols)] = True
    return e


def build_tiles(cells: torch.Tensor, feats: torch.Tensor, eligible: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """All N state tiles of a batch: [B, N] cells, [B, N, F] feats, [B, A] eligible -> [B, N, 2+F, R, K].

    Each slice's increment is written straight into the output layout one step late (what slice t
    adds shows from step t+1 on, so slice t is never in its own state), then one in-place cumsum
    over slices; no [B, N, A, F] intermediates (this is the data loader's hot spot)."""
    B, N, Fdim = feats.shape
    A, C = rows * cols, 2 + Fdim
    fair = (N / eligible.sum(-1).clamp(min=1)).to(feats.dtype)  # [B]
    out = torch.zeros(B, N, C, A, dtype=feats.dtype, device=feats.device)
    src = torch.cat([feats.new_ones(B, N - 1, 1), feats.new_zeros(B, N - 1, 1), feats[:, :-1]], -1) / fair[:, None, None]  # [B, N-1, C]
    out[:, 1:].scatter_(3, cells[:, :-1, None, None].expand(B, N - 1, C, 1), src.unsqueeze(3))
    out.cumsum_(1)
    out[:, :, 1] = eligible.to(feats.dtype)[:, None, :]  # eligibility channel
    return out.view(B, N, C, rows, cols)


class RunningTile:
    """The tile during rollout: starts empty, `place` adds one slice at a time. Batched over B.

    The tile tensor is kept and only the placed cell is rewritten per step (the same arithmetic as
    `build_tiles`, cell by cell), instead of rebuilding all R x K cells every step.
    """

    def __init__(self, eligible: torch.Tensor, n_slices: int, n_features: int, rows: int, cols: int):
        B = eligible.shape[0]
        self.rows, self.cols = rows, cols
        self.fair = n_slices / eligible.sum(-1).clamp(min=1).float()  # [B]
        self.occ = torch.zeros(B, rows * cols, device=eligible.device)
        self.load = torch.zeros(B, rows * cols, n_features, device=eligible.device)
        self.t = torch.zeros(B, 2 + n_features, rows * cols, device=eligible.device)  # [B, C, A]
        self.t[:, 1] = eligible.float()
        self.rows_idx = torch.arange(B, device=eligible.device)

    def tile(self) -> torch.Tensor:
        """Current tile [B, 1, C, R, K] (a view: read it before the next `place`)."""
        B, C, _ = self.t.shape
        return self.t.view(B, 1, C, self.rows, self.cols)

    def place(self, cells: torch.Tensor, feats: torch.Tensor) -> None:
        """cells [B], feats [B, F]: the slice just placed."""
        idx = self.rows_idx
        self.occ[idx, cells] += 1
        self.load[idx, cells] += feats
        self.t[idx, 0, cells] = self.occ[idx, cells] / self.fair
        self.t[idx, 2:, cells] = (self.load[idx, cells] / self.fair[:, None]).to(self.t.dtype)
