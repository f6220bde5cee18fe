"""The multi-head linear probe of Allen-Zhu & Li (Physics of LMs Part 1): each head mixes the frozen
hidden states of the positions k <= i with softmax weights that depend on positions only,
G_i = sum_r sum_{k<=i} w_{r,i->k} U_r h_k with w_{r,i->k} = softmax_k <P_{i,r}, P_{k,r}>, and a
linear classifier reads G_i. The mixing depends on no hidden state, so the probe stays linear in h.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from lmsci_mi.config import Config, config
from lmsci_mi.errors import UserInputError

__all__ = [
    "MultiHeadLinearProbe",
    "MultiHeadProbeConfig",
    "MultiHeadProbeFits",
    "balanced_accuracy",
    "fit_multihead_probes",
]


@config
class MultiHeadProbeConfig(Config):
    """Training of the multi-head linear probe (Adam on mini-batches of training sequences)."""

    heads: int = field(default=4, metadata={"help": "mixing heads r", "ge": 1})
    position_dim: int = field(
        default=16, metadata={"help": "width of the position embeddings P", "ge": 1}
    )
    steps: int = field(default=200, metadata={"help": "Adam steps", "ge": 1})
    batch_size: int = field(default=64, metadata={"help": "sequences per Adam step", "ge": 1})
    lr: float = field(default=1e-2, metadata={"help": "Adam learning rate", "gt": 0})
    weight_decay: float = field(
        default=1e-4, metadata={"help": "L2 on the read-out maps U_r", "ge": 0}
    )
    seed: int = field(default=0, metadata={"help": "seed of the probe's initial weights"})


class MultiHeadLinearProbe(nn.Module):
    """G_i = sum_r sum_{k<=i} softmax_k(<P_{i,r}, P_{k,r}>) U_r h_k, then logits = G_i + b.

    The read-out U_r maps straight to the classes: a low-rank U_r followed by a linear classifier
    is the same family of functions, since both are linear. One module holds independent probes
    for several layers and tasks (leading axes of every parameter), so they train in one loop;
    their parameters never mix, so this equals training each alone.
    """

    def __init__(
        self,
        n_layers: int,
        n_classes: Sequence[int],
        d_model: int,
        n_positions: int,
        config: MultiHeadProbeConfig,
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(config.seed)
        n_tasks, width = len(n_classes), max(n_classes)
        self.position = nn.Parameter(
            0.5
            * torch.randn(
                n_layers,
                n_tasks,
                config.heads,
                n_positions,
                config.position_dim,
                generator=generator,
            )
        )
        self.read = nn.Parameter(
            torch.randn(n_layers, n_tasks, config.heads, d_model, width, generator=generator)
            / (d_model**0.5 * config.heads)
        )
        self.bias = nn.Parameter(torch.zeros(n_layers, n_tasks, width))
        # classes a task does not have get a large negative logit
        absent = torch.arange(width)[None, :] >= torch.tensor(list(n_classes))[:, None]
        self.register_buffer("absent", absent.float() * -1e9)

    def mixing(self, n_pos: int) -> Float[Tensor, "layer task head dst src"]:
        """The heads' position-only weights w_{r,i->k}, masked to k <= i (a causal model)."""
        p = self.position[..., :n_pos, :]
        scores = p @ p.transpose(-1, -2)
        causal = torch.ones(n_pos, n_pos, dtype=torch.bool, device=p.device).tril()
        return scores.masked_fill(~causal, float("-inf")).softmax(-1)

    def forward(
        self, hidden: Float[Tensor, "layer batch pos d_model"]
    ) -> Float[Tensor, "layer task batch pos class"]:
        read = torch.einsum("lbkd,ltrdc->ltrbkc", hidden, self.read)
        mixed = torch.einsum("ltrik,ltrbkc->ltbic", self.mixing(hidden.shape[2]), read)
        absent: Tensor = self.absent  # type: ignore[assignment]
        return mixed + (self.bias + absent)[:, :, None, None, :]


@dataclass(frozen=True)
class MultiHeadProbeFits:
    """Fitted multi-head probes, scored once on the test sequences' labelled tokens.

    Attributes:
        accuracy: ``[layer, task]`` test accuracy.
        balanced_accuracy: ``[layer, task]`` mean over classes of the test recall (50% for a
            constant guess on a binary task, whatever the class balance).
        train_accuracy: ``[layer, task]``.
        probe: the fitted module.
    """

    accuracy: Tensor
    balanced_accuracy: Tensor
    train_accuracy: Tensor
    probe: MultiHeadLinearProbe = field(repr=False)


def balanced_accuracy(predicted: Tensor, labels: Tensor, n_classes: int) -> Tensor:
    """Mean over the classes present in ``labels`` of the fraction of them predicted right."""
    recalls = [
        (predicted[labels == c] == c).float().mean()
        for c in range(n_classes)
        if bool((labels == c).any())
    ]
    return torch.stack(recalls).mean()


def fit_multihead_probes(
    hidden: Float[Tensor, "layer seq pos d_model"],
    labels: Int[Tensor, "task seq pos"],
    masks: Bool[Tensor, "task seq pos"],
    train: Int[Tensor, " n_train"],
    test: Int[Tensor, " n_test"],
    config: MultiHeadProbeConfig | None = None,
) -> MultiHeadProbeFits:
    """Fit one multi-head linear probe per layer and task on whole sequences of frozen states.

    Features are standardised per layer with the training tokens' mean and std. Each task's loss
    is cross-entropy over its own labelled tokens (``masks``); the model is not touched (the
    features are given).

    Args:
        hidden: hidden states of whole sequences (padding allowed: leave it out of ``masks``).
        labels: class index per task and token (anything where the task's mask is False).
        masks: the tokens that carry each task's label.
        train, test: sequence indices of the two splits.
        config: heads, position width, Adam settings.

    Returns:
        The probes with their accuracies, scored once on ``test``.

    >>> g = torch.Generator().manual_seed(0)
    >>> tokens = torch.randint(0, 2, (64, 12), generator=g)
    >>> hidden = torch.nn.functional.one_hot(tokens, 8).float()[None]  # only the token is visible
    >>> labels = torch.roll(tokens, 1, dims=1)[None]                   # the previous token
    >>> mask = torch.ones_like(labels, dtype=torch.bool)
    >>> mask[..., 0] = False
    >>> fits = fit_multihead_probes(hidden, labels, mask, torch.arange(48), torch.arange(48, 64),
    ...                             MultiHeadProbeConfig(steps=150, batch_size=48))
    >>> bool(fits.accuracy[0, 0] > 0.95)  # a linear probe on h_i alone gets 50%
    True
    """
    config = config if config is not None else MultiHeadProbeConfig()
    if hidden.shape[1:3] != labels.shape[1:] or labels.shape != masks.shape:
        raise UserInputError(
            f"hidden {tuple(hidden.shape)} must be [layer, seq, pos, d] and labels "
            f"{tuple(labels.shape)} and masks {tuple(masks.shape)} [task, seq, pos] alike"
        )
    if not masks[:, train].any(dim=(1, 2)).all():
        raise UserInputError("every task needs labelled tokens in the training sequences")
    hidden = hidden.float()
    any_label = masks.any(0)
    train_tokens = hidden[:, train][:, any_label[train]]
    mean = train_tokens.mean(1)[:, None, None]
    std = train_tokens.std(1).clamp_min(1e-6)[:, None, None]
    features = (hidden - mean) / std
    labels = labels.clamp_min(0) * masks
    n_classes = [int(labels[t][masks[t]].max()) + 1 for t in range(len(labels))]
    probe = MultiHeadLinearProbe(
        hidden.shape[0], n_classes, hidden.shape[-1], hidden.shape[2], config
    )
    probe = probe.to(hidden.device)
    x, y, m = features[:, train], labels[:, train], masks[:, train]
    _train(probe, x, y, m, config)
    with torch.no_grad():
        train_pred = torch.cat(
            [probe(x[:, i : i + 256]).argmax(-1) for i in range(0, x.shape[1], 256)], 2
        )
        test_x = features[:, test]
        test_pred = torch.cat(
            [probe(test_x[:, i : i + 256]).argmax(-1) for i in range(0, len(test), 256)], 2
        )
    shape = (hidden.shape[0], len(labels))
    accuracy, balanced, train_accuracy = torch.zeros(shape), torch.zeros(shape), torch.zeros(shape)
    for layer in range(shape[0]):
        for t in range(shape[1]):
            test_mask, train_mask = masks[t, test], m[t]
            truth = labels[t, test][test_mask]
            guess = test_pred[layer, t][test_mask]
            accuracy[layer, t] = (guess == truth).float().mean()
            balanced[layer, t] = balanced_accuracy(guess, truth, n_classes[t])
            train_accuracy[layer, t] = (
                (train_pred[layer, t][train_mask] == y[t][train_mask]).float().mean()
            )
    return MultiHeadProbeFits(accuracy, balanced, train_accuracy, probe)


def _train(
    probe: MultiHeadLinearProbe, x: Tensor, y: Tensor, m: Tensor, config: MultiHeadProbeConfig
) -> None:
    """Adam over seeded shuffles of the training sequences; each task's loss is the mean
    cross-entropy over its labelled tokens, summed over layers and tasks."""
    optimiser = torch.optim.Adam(probe.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(config.seed)
    order = torch.zeros(0, dtype=torch.long)
    for _ in range(config.steps):
        if len(order) < min(config.batch_size, x.shape[1]):
            order = torch.cat([order, torch.randperm(x.shape[1], generator=generator)])
        rows, order = order[: config.batch_size].to(x.device), order[config.batch_size :]
        logits = probe(x[:, rows])  # [layer, task, seq, pos, class]
        targets, weights = y[:, rows], m[:, rows]
        token_loss = nn.functional.cross_entropy(
            logits.flatten(0, 3),
            targets.expand(len(logits), *targets.shape).flatten(),
            reduction="none",
        ).view(logits.shape[:4])
        counts = weights.sum((1, 2)).clamp_min(1).float()
        loss = ((token_loss * weights).sum((2, 3)) / counts).sum()
        loss = loss + config.weight_decay * probe.read.pow(2).sum()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
