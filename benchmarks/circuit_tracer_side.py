"""One side of benchmarks/graphs_vs_circuit_tracer.py: a worker process that loads an exported model
and circuit-tracer-format transcoders once, then computes attribution graphs of one prompt on request.

Both sides run this same file, in their own venv and process, so that loading, timing and memory are
measured alike (``--side lmsci-mi`` in the project's venv with the checkout on PYTHONPATH;
``--side circuit-tracer`` in scripts/install_circuit_tracer.sh's venv, which has no lmsci-mi: that
side imports only torch, safetensors, yaml, transformers, transformer_lens and circuit_tracer).

The export (written by the benchmark): ``model/config.json`` (a HookedTransformerConfig's fields,
the model's name, the tokenizer folder or null) and ``model/model.safetensors`` (its parameters);
``transcoders/`` in circuit-tracer's format (``layer_{i}.safetensors`` + ``config.yaml``).

Protocol: one JSON request per stdin line, one JSON reply per stdout line (logging goes to stderr):
``{"op": "graph", "out": PATH}`` computes a graph and writes its adjacency, node keys and clean
logits to PATH (torch.save); ``{"op": "time"}`` computes one and returns only the measurements;
``{"op": "quit"}``. Each reply has ``seconds`` (the attribution alone, tokens given) and, on the CPU,
``rss_mb`` (resident memory before it) and ``peak_mb`` (the process's peak resident memory during it,
reset through /proc/self/clear_refs first).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("circuit_tracer_side")
SIDES = ("lmsci-mi", "circuit-tracer")
_REPLIES = sys.stdout


def _memory_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status", encoding="utf-8") as status:
            line = next(line for line in status if line.startswith(field + ":"))
    except (OSError, StopIteration):  # not Linux
        return None
    return int(line.split()[1]) / 1024


def measured(fn: Callable[[], Any]) -> tuple[Any, dict[str, float | None]]:
    """``fn()`` and its seconds, the resident memory before it and the peak during it (MB)."""
    try:  # "5" resets the peak resident set size (VmHWM) to the current one (Linux >= 4.0)
        Path("/proc/self/clear_refs").write_text("5", encoding="utf-8")
        reset = True
    except OSError:
        reset = False
    rss = _memory_mb("VmRSS")
    start = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - start
    peak = _memory_mb("VmHWM") if reset else None
    return out, {"seconds": seconds, "rss_mb": rss, "peak_mb": peak}


def model_config(folder: Path, fields: set[str]) -> tuple[dict[str, Any], list[str]]:
    """The exported config's entries that this TransformerLens knows, and the names it does not
    (a newer TransformerLens has more fields; the clean-logit check catches a dropped one that
    mattered)."""
    exported = json.loads((folder / "config.json").read_text(encoding="utf-8"))["cfg"]
    kept = {k: v for k, v in exported.items() if k in fields}
    kept["dtype"] = getattr(torch, exported.get("dtype", "float32"))
    kept["device"] = "cpu"
    kept["init_weights"] = False  # the weights come from the file
    return kept, sorted(set(exported) - fields)


def tokenizer(folder: Path, *, old_transformers: bool = False) -> Any:
    path = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("tokenizer")
    if path is None:
        return None
    from transformers import AutoTokenizer

    if old_transformers:
        path = _tokenizer_for_old_transformers(Path(path))
    return AutoTokenizer.from_pretrained(path)


def _tokenizer_for_old_transformers(folder: Path) -> str:
    """A copy of the tokenizer folder that transformers 4.57 (circuit-tracer's pin) can load.

    Our cached folders come from transformers 5, whose tokenizer_config.json names the class
    "TokenizersBackend", which 4.57 does not have; TransformerLens's set_tokenizer reloads the
    tokenizer by its path through AutoTokenizer, so the copy names PreTrainedTokenizerFast (the
    same tokenizer.json) instead."""
    import shutil
    import tempfile

    copy = Path(tempfile.mkdtemp(prefix="ct_tokenizer_"))
    for path in folder.iterdir():
        if path.is_file():
            shutil.copy(path, copy / path.name)
    config_path = copy / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return str(copy)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


# --- circuit-tracer ---------------------------------------------------------------------------


def peer_transcoders(folder: Path) -> Any:
    """circuit-tracer's TranscoderSet from the files, built as its tests build theirs.

    The registry's circuit-tracer 0.5.0 cannot load TopK files (its load_transcoder_set predates
    the tag's activation=/k= arguments), so every layer is built here from ``config.yaml`` and the
    tensors, in float32: SingleLayerTranscoder's default dtype is bfloat16, which would round the
    weights on load.
    """
    import yaml
    from circuit_tracer.transcoder import SingleLayerTranscoder, TranscoderSet
    from circuit_tracer.transcoder.activation_functions import JumpReLU, TopK
    from safetensors.torch import load_file

    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    layers = {}
    for path in sorted(folder.glob("layer_*.safetensors")):
        layer = int(path.stem.split("_")[1])
        tensors = load_file(str(path))
        d_transcoder, d_model = tensors["W_enc"].shape
        if "activation_function.threshold" in tensors:
            activation: Any = JumpReLU(tensors["activation_function.threshold"], 0.1)
        elif config.get("activation") == "topk":
            activation = TopK(int(config["k"]))
        else:
            activation = torch.nn.functional.relu
        tc = SingleLayerTranscoder(d_model, d_transcoder, activation, layer,
                                   skip_connection="W_skip" in tensors, device=torch.device("cpu"),
                                   dtype=torch.float32)
        tc.load_state_dict(tensors)
        layers[layer] = tc
    return TranscoderSet(layers, feature_input_hook=config["feature_input_hook"],
                         feature_output_hook=config["feature_output_hook"], scan=config.get("scan"))


def peer_model(model_dir: Path, transcoder_dir: Path) -> tuple[Any, list[str]]:
    """circuit-tracer's TransformerLens replacement model, built offline: ``from_config`` with the
    exported config and a tokenizer object (a name would be fetched from the hub), then the
    exported weights under the names its MLP and unembedding wrappers give them."""
    import dataclasses

    from circuit_tracer.replacement_model.replacement_model_transformerlens import (
        TransformerLensReplacementModel,
    )
    from transformer_lens import HookedTransformerConfig

    fields = {f.name for f in dataclasses.fields(HookedTransformerConfig)}
    cfg_dict, dropped = model_config(model_dir, fields)
    cfg_dict["tokenizer_name"] = None
    cfg = HookedTransformerConfig.from_dict(cfg_dict)
    model = TransformerLensReplacementModel.from_config(
        cfg, peer_transcoders(transcoder_dir), tokenizer=tokenizer(model_dir, old_transformers=True))
    state = {}
    for name, value in weights(model_dir).items():
        if ".mlp." in name:
            name = name.replace(".mlp.", ".mlp.old_mlp.", 1)
        elif name.startswith("unembed."):
            name = "unembed.old_unembed." + name[len("unembed."):]
        state[name] = value
    result = model.load_state_dict(state, strict=False)
    params = {name for name, _ in model.named_parameters()}
    missing = [n for n in result.missing_keys if n in params and not n.startswith("transcoders.")]
    if result.unexpected_keys or missing:
        raise RuntimeError(f"weights do not fit circuit-tracer's model: unexpected "
                           f"{result.unexpected_keys[:5]}, missing {missing[:5]}")
    return model, dropped


def peer_graph(model: Any, tokens: torch.Tensor, options: dict[str, Any]) -> dict[str, Any]:
    from circuit_tracer import attribute

    graph = attribute(tokens, model, offload=None, verbose=False, **options)
    if not torch.equal(graph.input_tokens.cpu(), tokens):  # it prepends a BOS unless one is there
        raise RuntimeError(f"circuit-tracer changed the tokens {tokens.tolist()} into "
                           f"{graph.input_tokens.tolist()}: start the prompt with a special token")
    return {
        "adjacency": graph.adjacency_matrix.float().cpu(),
        "features": graph.active_features[graph.selected_features].long().cpu(),
        "n_active": int(graph.active_features.shape[0]),
        "logit_tokens": torch.tensor([int(t.vocab_idx) for t in graph.logit_targets]),
        "logit_probs": graph.logit_probabilities.float().cpu(),
    }


# --- lmsci-mi ---------------------------------------------------------------------------------


def our_model(model_dir: Path, transcoder_dir: Path) -> tuple[Any, list[str]]:
    """Our LensModel on the same exported model, and the transcoders read by our own loader."""
    import dataclasses

    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from lmsci_mi import LensModel
    from lmsci_mi.transcoders.files import load_circuit_tracer

    fields = {f.name for f in dataclasses.fields(HookedTransformerConfig)}
    cfg_dict, dropped = model_config(model_dir, fields)
    cfg_dict["tokenizer_name"] = None
    tok = tokenizer(model_dir)
    model = HookedTransformer(HookedTransformerConfig.from_dict(cfg_dict), tokenizer=tok)
    result = model.load_state_dict(weights(model_dir), strict=False)
    params = {name for name, _ in model.named_parameters()}
    if result.unexpected_keys or params & set(result.missing_keys):
        raise RuntimeError(f"weights do not fit the model: unexpected {result.unexpected_keys[:5]}, "
                           f"missing {sorted(params & set(result.missing_keys))[:5]}")
    name = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["name"]
    lm = LensModel(model, name=name, source=str(model_dir), tokenizer=tok, sink_token_id=None)
    return (lm, load_circuit_tracer(transcoder_dir, model_name=name)), dropped


def our_graph(built: Any, tokens: torch.Tensor, options: dict[str, Any]) -> dict[str, Any]:
    from lmsci_mi.circuits.graphs import GraphConfig, attribution_graph

    lm, transcoders = built
    graph = attribution_graph(lm, transcoders, tokens, GraphConfig(max_tokens=max(256, len(tokens)),
                                                                   **options))
    return {"adjacency": graph.values.float(), "features": graph.features.long(),
            "n_active": graph.n_active, "logit_tokens": graph.logit_tokens.long(),
            "logit_probs": graph.logit_probs.float()}


def clean_logits(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    """The model's logits at the last position (the check that both sides run the same model)."""
    model = getattr(model, "model", model)  # a LensModel's HookedTransformer
    with torch.no_grad():
        return model(tokens[None])[0, -1].float().cpu()


def serve(args: argparse.Namespace) -> None:
    global _REPLIES
    # Replies own stdout; anything a library prints goes to stderr instead of into the protocol.
    _REPLIES, sys.stdout = sys.stdout, sys.stderr
    torch.set_num_threads(args.threads)
    tokens = torch.tensor([int(t) for t in args.tokens.split(",")])
    options = json.loads(args.options)
    loaded, seconds = measured(lambda: (peer_model if args.side == "circuit-tracer" else our_model)(
        args.model, args.transcoders))
    built, dropped = loaded
    graph_fn = peer_graph if args.side == "circuit-tracer" else our_graph
    model = built if args.side == "circuit-tracer" else built[0]
    reply(ready=True, load=seconds, dropped_config=dropped, versions=versions(args.side))
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            return
        out, stats = measured(lambda: graph_fn(built, tokens, options))
        if request["op"] == "graph":
            out["clean_logits"] = clean_logits(model, tokens)
            out["tokens"] = tokens
            torch.save(out, request["out"])
        reply(**stats)


def versions(side: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = ["torch", "transformers", "transformer-lens"]
    names += ["circuit-tracer", "nnsight"] if side == "circuit-tracer" else ["lmsci-mi"]
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    if side == "circuit-tracer":
        import circuit_tracer

        found["circuit-tracer source"] = str(Path(circuit_tracer.__file__).parent)
    return found


def reply(**fields: Any) -> None:
    _REPLIES.write(json.dumps(fields) + "\n")
    _REPLIES.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", choices=SIDES, required=True)
    parser.add_argument("--model", type=Path, required=True, help="the exported model folder")
    parser.add_argument("--transcoders", type=Path, required=True, help="circuit-tracer-format folder")
    parser.add_argument("--tokens", required=True, help="the prompt's token ids, comma-separated")
    parser.add_argument("--options", default="{}", help="attribution options as JSON (batch_size, ...)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    serve(args)


if __name__ == "__main__":
    main()
