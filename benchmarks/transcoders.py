"""Per-layer skip transcoders for the CFG GPT and SmolLM2: trained offline (cached per layer,
resumable), measured on held-out text (explained variance, L0, dead fraction, next-token loss
recovered when spliced in, each with a 95% interval over texts), exported in circuit-tracer's
format and the compact float16 form, and tabled with their training cost.

    PYTHONPATH=. python benchmarks/transcoders.py --model cfg-gpt --threads 1     # every layer, minutes
    OMP_NUM_THREADS=1 flock /work/model.lock env PYTHONPATH=. python benchmarks/transcoders.py \\
        --model smollm2-135m --threads 1 --budget-minutes 170                 # resumable: rerun to go on
    PYTHONPATH=. python benchmarks/transcoders.py --quick                         # toy-2l, seconds (out/quick/)

Writes docs/data/transcoders_<model>.json. Each model has a preset
(``lmsci_mi.transcoders.presets.TRANSCODER_PRESETS``, what ``load_transcoders`` builds): the data, the
expansion, the steps and the warm-up that fit its budget on this CPU; the rest is Paulo et al.'s
recipe (``TranscoderTrainConfig``'s defaults and their paper values). ``--device cuda`` trains on
a GPU (the harvest and the metrics run where the model is). A run stopped by ``--budget-minutes``
or killed resumes at the layer and step it reached (the per-layer cache, then the metrics' cache).
``--export DIR`` writes the circuit-tracer files, ``--compact DIR`` the shipping form.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import harness
import torch
from doc_tables.schemas.transcoders import LayerRow, TranscodersData

from lmsci_mi import LensModel, load_model
from lmsci_mi.probes.cfg import load_cfg_model
from lmsci_mi.transcoders.data import transcoder_rows
from lmsci_mi.transcoders.files import compact_size, save_circuit_tracer, save_compact
from lmsci_mi.transcoders.metrics import clean_losses, transcoder_metrics
from lmsci_mi.transcoders.presets import TRANSCODER_PRESETS
from lmsci_mi.transcoders.train import (
    TrainedLayer,
    train_transcoders,
    transcoder_folder,
)

TARGET_RECOVERED = 0.8
TARGET_L0 = 64


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="cfg-gpt", choices=sorted(TRANSCODER_PRESETS))
    parser.add_argument("--device", default=None, help="train there (default: the CPU)")
    parser.add_argument("--budget-minutes", type=float, default=None,
                        help="start no new layer after this long (a rerun goes on)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over texts")
    parser.add_argument("--export", type=Path, default=None, help="write circuit-tracer files here")
    parser.add_argument("--compact", type=Path, default=None, help="write the compact form here")


def load(name: str) -> LensModel:
    if name == "cfg-gpt":
        return load_cfg_model(train=False)[0]  # the shipped GPT, never retrained here
    return load_model(name)


def row(q: Any, trained: TrainedLayer) -> LayerRow:
    return LayerRow(
        layer=q.layer, explained_variance=q.explained_variance.as_dict(), l0=q.l0.as_dict(),
        dead_fraction=q.dead_fraction.as_dict(), loss_recovered=q.loss_recovered.as_dict(),
        loss_clean=q.loss_clean, loss_spliced=q.loss_spliced, loss_zero=q.loss_zero,
        negative_kept_fraction=q.negative_kept_fraction, n_tokens=q.n_tokens,
        train_seconds=trained.seconds, train_cpu_seconds=trained.cpu_seconds,
        harvest_seconds=trained.harvest_seconds, steps=trained.steps,
        final_loss=trained.final_loss, n_train_tokens=trained.n_train_tokens,
        threads=trained.threads, lr=trained.lr,
    )


def main() -> None:
    run = harness.start(__doc__, __file__, threads=1, flags=add_flags,
                        out=lambda a: harness.DATA / f"transcoders_{'toy-2l' if a.quick else a.model}.json")
    name = "toy-2l" if run.quick else run.args.model
    preset = TRANSCODER_PRESETS[name]
    train = preset.train_config()
    with run.timed("load"):
        lm = load(name)
    budget = run.args.budget_minutes * 60 if run.args.budget_minutes is not None else None
    with run.timed("train"):
        tcs, trained = train_transcoders(
            lm, preset.data, train, layers_per_pass=preset.layers_per_pass,
            threads=run.args.threads, device=run.args.device, budget_seconds=budget, progress=True,
        )
    held = transcoder_rows(lm, preset.data)
    cache = run.cache(exclude=["export", "compact", "budget_minutes", "device"])
    folder = transcoder_folder(lm, preset.data, train)
    with run.timed("metrics"):
        # one cached result per layer, so a stopped run keeps the layers it measured; the model's
        # own losses are the same for every layer, so computed (and cached) once
        clean = torch.tensor(cache.get(f"{folder.name}-clean", lambda: clean_losses(
            lm, held.held_out, batch_size=preset.metrics_batch).tolist()), dtype=torch.float64)
        measured = [
            cache.result(f"{folder.name}-layer-{layer}", lambda layer=layer: transcoder_metrics(
                lm, tcs, held.held_out, layers=[layer], n_resamples=run.args.resamples,
                batch_size=preset.metrics_batch, data_source=held.source, progress=True, clean=clean))
            for layer in sorted(tcs)
        ]
    qualities = [m.layers[0] for m in measured]
    if run.args.export is not None:
        save_circuit_tracer(tcs, run.args.export)
    compact = None
    if run.args.compact is not None:
        # live latents: the non-zero decoder rows (a latent that never fired in training keeps
        # its zero initialisation); save_compact's default
        save_compact(tcs, run.args.compact)
        compact = compact_size(run.args.compact)
    meeting = [q.layer for q in qualities
               if q.loss_recovered.estimate >= TARGET_RECOVERED and q.l0.estimate <= TARGET_L0]
    for q in qualities:
        print(f"L{q.layer}: EV {q.explained_variance}  L0 {q.l0}  dead {q.dead_fraction}  "
              f"recovered {q.loss_recovered}")
    first = tcs[sorted(tcs)[0]]
    run.write(TranscodersData(
        transcoders=dict(model=lm.name, folder=folder.name, input_site=tcs.input_site,
                         output_site=tcs.output_site, d_model=tcs.d_model,
                         d_transcoder=first.d_transcoder, layers_built=sorted(tcs),
                         layers_missing=[i for i in range(lm.cfg.n_layers) if i not in tcs],
                         compact_bytes=compact),
        data=dict(preset.data.params()), train=dict(train.params()), preset_reason=preset.reason,
        held_out_texts=len(held.held_out), data_source=held.source,
        bootstrap=dict(resamples=run.args.resamples, over="held-out texts", seed=0),
        target=f"loss recovered >= {TARGET_RECOVERED} at L0 <= {TARGET_L0}",
        layers_meeting_target=meeting,
        rows=[row(q, trained[q.layer]) for q in qualities],
    ))


if __name__ == "__main__":
    main()
