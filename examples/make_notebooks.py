"""Write the example notebooks, one per user story (with --execute, run them so outputs are saved).

    .venv/bin/python examples/make_notebooks.py [--execute] [--only NAME ...]

The notebooks are generated from the cell lists below, so they stay reviewable as code. Each reads
``LMSCI_MI_QUICK`` through :func:`lmsci_mi.config.quick_mode` to run a smaller workload on the
same model (the test suite runs them so). Files a notebook writes go to ``out/<name>/`` under the
folder it runs in. Attention views render inline (``attention_view``): the 1.3 MB circuitsvis
script bundle comes once per notebook, in the first view's output, so the views show in any front
end and in an exported HTML file, wherever it is saved.

To add a story's notebook, add one :class:`Notebook` entry to ``NOTEBOOKS``; an entry whose cells
are still ``None`` is listed as pending (tests skip it with the reason).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from lmsci_mi.results import _RESULT_TYPES as RESULT_TYPES

Cell = tuple[str, str]


def md(text: str) -> Cell:
    return ("md", textwrap.dedent(text).strip())


def code(text: str) -> Cell:
    return ("code", textwrap.dedent(text).strip())


def setup(name: str, *imports: str) -> Cell:
    """The first code cell of every notebook: offline, quick mode, an output folder, the model."""
    return code(
        "import os\n"
        "os.environ.setdefault('HF_HUB_OFFLINE', '1')  # the bundled model needs no network\n"
        "from pathlib import Path\n"
        + "".join(f"{line}\n" for line in imports)
        + "from lmsci_mi import load_model\n"
        "from lmsci_mi.config import quick_mode\n\n"
        "QUICK = quick_mode()  # LMSCI_MI_QUICK=1: a smaller workload on the same model\n"
        f"OUT = Path('out/{name}')\n"
        "OUT.mkdir(parents=True, exist_ok=True)\n"
        "lm = load_model('smollm2-135m')\n"
        "lm"
    )


@dataclass(frozen=True)
class Notebook:
    """One user story: its notebook ``examples/<name>.ipynb``, built from ``cells``, and the
    example script ``examples/<script>`` that does the same from the command line.

    ``cells`` is None while the story's code lives on another branch; ``pending`` says which.
    """

    name: str
    story: str
    script: str | None
    cells: list[Cell] | None
    pending: str = ""


CIRCUITS = [
    md("""
    # Scripting a circuit discovery: indirect object identification in SmolLM2

    *"When Mary and John went to the store, John gave a drink to"* → **Mary**. Which layers,
    positions and heads carry the answer? We patch activations from this clean prompt into a
    corrupted one (the second name changed to *Mary*) and measure how much of the logit
    difference `logit(Mary) − logit(John)` each patch restores (1 = all of it).
    """),
    setup("circuits", "from IPython.display import Image"),
    code("""
    from lmsci_mi.circuits import (AttributionConfig, PatchingConfig, PatchingResult,
                                   attribution_patch, patch_activations)
    from lmsci_mi.circuits.attention import attention_view
    from lmsci_mi.data.pairs import PromptPairs

    clean = 'When Mary and John went to the store, John gave a drink to'
    corrupted = 'When Mary and John went to the store, Mary gave a drink to'
    # scored by the pair's logit difference, logit(Mary) - logit(John)
    pairs = PromptPairs(clean, corrupted, answers=lm.token_id(' Mary'), wrongs=lm.token_id(' John'))
    s2 = len(lm.encode('When Mary and John went to the store, John')) - 1
    print('S2 (the repeated name) is position', s2, repr(lm.to_str_tokens(clean)[s2]))
    """),
    md("""
    ## 1. The residual stream, layer by position

    One batched sweep patches `resid_pre` at every (layer, position). Early on the answer lives
    at S2; later it has moved to the last token, where it is read out.
    """),
    code("""
    layers = tuple(range(0, lm.cfg.n_layers, 3)) if QUICK else None  # quick: every third layer
    resid = patch_activations(lm, pairs,
                              config=PatchingConfig(site='resid_pre', layers=layers, normalise=True))
    print(f'logit diff: clean {resid.clean_value:+.2f}, corrupted {resid.corrupted_value:+.2f}')
    resid.plot(OUT / 'resid_pre.png')
    Image(OUT / 'resid_pre.png')
    """),
    md("""
    ## 2. Heads: attribution patching, checked against exact patching

    Attribution patching (a gradient approximation, 3 passes) scores every head's output at once;
    `compare_exact=True` also patches each head exactly and reports the Spearman rank correlation,
    which says how far the cheap shortlist can be trusted on this model.
    """),
    code("""
    heads = attribution_patch(lm, pairs,
                              config=AttributionConfig(normalise=True, compare_exact=True))
    exact = heads.exact
    print(f'Spearman(attribution, exact) = {heads.rank_correlation:.2f}')
    print('attribution:', ', '.join(f'{h} {v:+.2f}' for h, v in heads.top(5)))
    print('exact:      ', ', '.join(f'{h} {v:+.2f}' for h, v in exact.top(5)))
    exact.plot(OUT / 'heads_exact.png')
    Image(OUT / 'heads_exact.png')
    """),
    md("""
    ## 3. What the top heads attend to

    The circuitsvis view renders inline, from the notebook itself: its script is included once,
    in the first view's output, so it shows in JupyterLab, VS Code and an exported HTML file alike,
    with no network and no file beside the notebook.
    """),
    code("""
    top = [head for head, _ in exact.top(3)]
    attention_view(lm, clean, top)
    """),
    md("""
    ## 4. Keep the results

    Every result saves as JSON plus safetensors (never pickle) with its `meta` (model, prompts,
    config, version), loads back unchanged, and flattens to a long table.
    """),
    code("""
    path = exact.save(OUT / 'heads_exact.json')
    assert PatchingResult.load(path) == exact
    exact.to_dataframe().sort_values('value', ascending=False).head(5)
    """),
]

EDIT = [
    md("""
    # Editing a fact with ROME

    We move the Eiffel Tower to Rome in SmolLM2 with a rank-one edit of one MLP (ROME, Meng et
    al. 2022), check that the edit generalises to a paraphrase but leaves a neighbouring fact
    alone, and undo it bit for bit. The MLP key statistics of the edited layer are computed once
    (a few minutes on two CPU cores) and cached.
    """),
    setup("edit_fact", "import pandas as pd", "import torch"),
    code("""
    from lmsci_mi.editing import (EditRequest, ROMEConfig, default_rome_layer, rome_edit,
                                  target_nll)

    request = EditRequest(
        prompt='{} is located in the city of',
        subject='The Eiffel Tower',
        target_new=' Rome',
        target_true=' Paris',
        paraphrase_prompts=('The Eiffel Tower can be found in the city of',),
        neighborhood_prompts=('The Louvre is located in the city of',),
    )
    prompts = {'rewrite': request.rewrite_prompt,
               'paraphrase': request.paraphrase_prompts[0],
               'neighbour': request.neighborhood_prompts[0]}
    n_tokens = 6 if QUICK else 12

    def probe(stage):
        rows = []
        for kind, prompt in prompts.items():
            p_new, p_true = (-target_nll(lm, [prompt, prompt],
                                          [request.target_new, request.target_true])).exp()
            rows.append({'stage': stage, 'prompt': kind, 'p(Rome)': float(p_new),
                         'p(Paris)': float(p_true), 'greedy': lm.generate(prompt, n_tokens)})
        return rows

    layer = default_rome_layer(lm)
    original = lm.model.blocks[layer].mlp.W_out.detach().clone()
    rows = probe('before')
    """),
    md("""
    ## The edit, as a context manager

    `rome_edit` changes the weights and returns a handle that remembers the originals; leaving
    the `with` block restores them (or call `handle.restore()`).
    """),
    code("""
    with rome_edit(lm, request, ROMEConfig(layer=layer)) as handle:
        print(f'edited layer {handle.layers[0]} in {handle.seconds:.1f} s')
        rows += probe('edited')
    rows += probe('restored')
    print('restored bit for bit:', torch.equal(lm.model.blocks[layer].mlp.W_out, original))
    pd.set_option('display.max_colwidth', 60)
    pd.DataFrame(rows).round(3)
    """),
]

STEER = [
    md("""
    # Steering sentiment with LM-Steer

    LM-Steer (Han et al. 2024) learns a low-rank change of the output word embeddings,
    `h + ε s (h P1) P2ᵀ`, whose value `s` turns an attribute up or down continuously. The model
    stays frozen; the steer trains on the final normalised states of 200 labelled sentences. The
    default steer of the bundled model ships with lmsci-mi (`scripts/build_artefacts.py steer`
    rebuilds it, about 5 minutes), so this cell loads it rather than training.
    """),
    setup("steer", "from IPython.display import IFrame"),
    code("""
    from lmsci_mi.data.steering_texts import neutral_prompts, steering_texts
    from lmsci_mi.generation import GenerationConfig
    from lmsci_mi.steering import (HighlightConfig, SVDConfig, generate_steered,
                                   highlight_keywords, steer_svd, train_steer)
    from lmsci_mi.steering.evaluate import sentiment_scores

    # The default settings (LMSteerConfig(), SteerTrainConfig()): the shipped steer, no training.
    steer, run = train_steer(lm, steering_texts('sentiment'))
    print(f'{steer}: loss {run.unsteered_loss:.2f} -> {run.final_loss:.2f} '
          f'({len(run.values)} steps, {run.train_seconds:.0f} s when it was trained)')
    """),
    md("""
    ## Continuous control

    The same neutral prompts, continued at several steer values (greedy). VADER scores each
    continuation's sentiment from −1 to +1; beyond about ±2 the text degenerates.
    """),
    code("""
    prompts = list(neutral_prompts()[: 4 if QUICK else 16])
    sampling = GenerationConfig(max_new_tokens=20, top_p=0.9)  # T = 1, as the docs' curves
    for value in ((-2.0, 0.0, 2.0) if QUICK else (-2.0, -1.0, 0.0, 1.0, 2.0)):
        texts = generate_steered(lm, prompts, steer, {'sentiment': value}, sampling).texts
        mean = sum(sentiment_scores(texts)) / len(texts)
        print(f'{value:+.1f}  VADER {mean:+.2f}  {prompts[0]}{texts[0]!r}')
    """),
    md("""
    ## What the steer learned, and where it reads sentiment

    The top singular direction of the steer's matrix, read through the word embeddings, lists
    the words it raises and lowers. Keyword highlighting scores each token of a text by
    log p(+s) − log p(−s) and picks the best spans; the page is an offline circuitsvis view,
    saved to a file and shown in an IFrame.
    """),
    code("""
    probe = steer_svd(lm, steer, SVDConfig(n_directions=1))
    print('raises:', ' '.join(probe.top_words[0]))
    print('lowers:', ' '.join(probe.bottom_words[0]))
    review = 'The hotel was lovely and the staff were friendly, but the food was awful.'
    spans = highlight_keywords(lm, steer, review, HighlightConfig(value=5.0, max_spans=2))
    print('positive spans:', spans.span_texts())
    page = spans.save_html(OUT / 'highlight_positive.html')
    IFrame(page, width='100%', height=260)
    """),
    md("The steer saves as safetensors with the model's name and width, and loads only onto it."),
    code("""
    print(steer.save(OUT / 'sentiment.safetensors'))
    """),
]

HEADS = [
    md("""
    # Looking at attention heads

    Induction, previous-token and duplicate-token heads in SmolLM2-135M and in a toy model
    trained to have them, with circuitsvis views that work offline. Everything here runs on CPU
    in a few minutes.
    """),
    setup("heads", "from IPython.display import Image"),
    code("""
    from lmsci_mi.circuits.heads import (HeadScoreConfig, composition_scores, induction_scores,
                                         previous_token_scores)
    from lmsci_mi.circuits.toy_induction import load_toy_induction, training_record
    from lmsci_mi.data.repeated_tokens import repeated_random_tokens
    from lmsci_mi.sites import Head
    from lmsci_mi.circuits.attention import attention_view

    n_sequences = 4 if QUICK else 8
    """),
    md("""
    ## Induction scores on repeated random tokens

    One batched forward pass scores all 270 heads: the share of attention from each second-half
    token to the token after its first copy.
    """),
    code("""
    scores = induction_scores(lm, config=HeadScoreConfig(n_sequences=n_sequences, half_length=12))
    print(scores.top(6))
    scores.plot(OUT / 'induction_heatmap.png')
    Image(OUT / 'induction_heatmap.png')
    """),
    md("""
    ## What the top induction heads look at

    `attention_view` shows circuitsvis's view inline, with no network: the script bundle is
    included once per notebook (in the first view's output), not in every cell, so the views also
    render in an exported HTML file. `save_attention_html` writes the same view as a page of its
    own.
    """),
    code("""
    tokens = repeated_random_tokens(1, 12, vocab=(1000, 10000), sink_token_id=0, seed=3)
    top = [head for head, _ in scores.top(3)]
    attention_view(lm, tokens[0], top)
    """),
    md("## Previous-token heads on a sentence"),
    code("""
    prev = previous_token_scores(
        lm, config=HeadScoreConfig(n_sequences=n_sequences, half_length=12, exclude_bos=True))
    print(prev.top(4))
    attention_view(lm, 'When Mary and John went to the store, John gave a drink to',
                   [head for head, _ in prev.top(2)])
    """),
    md("""
    ## The toy model with a known answer

    A 2-layer attention-only transformer trained on repeated random tokens (cached after the
    first run). Its layer-1 induction head should K-compose with a layer-0 previous-token head.
    """),
    code("""
    toy = load_toy_induction()
    print('training cost:', training_record())
    toy_ind = induction_scores(toy, config=HeadScoreConfig(n_sequences=50))
    toy_prev = previous_token_scores(toy, config=HeadScoreConfig(n_sequences=50))
    print('induction:', toy_ind.top(2))
    print('previous token:', toy_prev.top(2))
    k = composition_scores(toy, 'K')
    best, _ = toy_ind.top(1)[0]
    print('K-composition into', best, ':',
          [round(k.score(Head(0, h), best), 3) for h in range(toy.cfg.n_heads)])
    toy_ind.plot(OUT / 'toy_induction.png')
    Image(OUT / 'toy_induction.png')
    """),
]

PROBES = [
    md("""
    # Probing SmolLM2 across layers, and exporting the results

    Does the residual stream after each layer linearly encode a city's country (read at the
    city's last token), or the number of a sentence's subject? Each layer gets an
    L2-regularised logistic probe, its strength chosen on a validation split, and a control task
    (Hewitt & Liang 2019): the same probe trained to give each word type a random label.
    Selectivity = accuracy − control accuracy.
    """),
    setup("probes", "import pandas as pd", "from IPython.display import Image"),
    code("""
    from lmsci_mi.probes import (ProbeSweep, ProbeSweepConfig, ProbeTaskConfig, probe_task,
                                 task_dataset)

    data = task_dataset('country')
    print(len(data), 'examples;', data.source)
    print(data.texts[0], '->', data.labels[0])
    # quick: six layers on 240 examples
    sweep_config = ProbeSweepConfig(layers=(0, 3, 6, 9, 12, 15) if QUICK else None)
    task_config = ProbeTaskConfig(n_examples=240 if QUICK else None)
    """),
    code("""
    sweep = probe_task(lm, 'country', sweep_config, task_config)
    print(sweep.peak())
    sweep.plot(OUT / 'country.png')
    Image(OUT / 'country.png')
    """),
    md("""
    ## Export

    The table has one row per layer. `export` writes it as CSV, Parquet or JSON for pandas, R or
    a spreadsheet; `save` keeps the whole result (each layer's probe weights included) as JSON +
    safetensors, which `ProbeSweep.load` reads back.
    """),
    code("""
    for suffix in ('csv', 'parquet', 'json'):
        print('wrote', sweep.export(OUT / f'country.{suffix}'))
    assert ProbeSweep.load(sweep.save(OUT / 'country_result.json')) == sweep
    table = pd.read_parquet(OUT / 'country.parquet')
    table[['layer', 'accuracy', 'control_accuracy', 'selectivity', 'majority', 'ci_low',
           'ci_high']].round(3).head(12)
    """),
    md("## A syntactic property: the subject's number, read after an attractor noun"),
    code("""
    number = probe_task(lm, 'subject_number', sweep_config, task_config)
    print(number.peak())
    number.plot(OUT / 'subject_number.png')
    Image(OUT / 'subject_number.png')
    """),
]

SAE = [
    md("""
    # Finding and steering sparse-autoencoder features in SmolLM2

    A TopK sparse autoencoder (sae-lens; d_sae 4608, k 48) reads the residual stream after block
    15 of SmolLM2-135M. It ships with lmsci-mi in a compact form (its live features in float16)
    and expands into the cache on first use, so nothing trains here; `lmsci-mi sae train`
    retrains it (about 25 minutes on two CPU cores). Feature indices are the trained SAE's.
    """),
    setup("sae", "from IPython.display import IFrame"),
    code("""
    from lmsci_mi.data.steering_texts import neutral_prompts
    from lmsci_mi.data.text_corpus import text_chunks
    from lmsci_mi.generation import GenerationConfig
    from lmsci_mi.sae import (FeatureConfig, FrequencyConfig, SAEStats,
                              clamp_sae_feature, feature_cards, find_features,
                              load_trained_sae, steer_with_sae_feature,
                              steering_frequency)

    sae = load_trained_sae(lm)  # never trains: the cached or the shipped SAE
    print(sae.hook, sae.d_sae, 'features;', sae.info.get('shipped', {}).get('live_features'),
          'shipped live')
    print(SAEStats.load(Path(sae.source) / 'stats.json').summary())
    """),
    md("""
    ## Browse features: top contexts, density, promoted tokens

    Feature cards come from one pass over a sample of the standard library's prose: each
    feature's top-activating contexts (the peak token in [[brackets]]), how often it fires, and
    the tokens its decoder direction promotes through the unembedding.
    """),
    code("""
    rows = text_chunks(lm, 6_000 if QUICK else 40_000).tolist()
    cards = feature_cards(lm, sae, rows, config=FeatureConfig(contexts=5))
    print(cards.describe(212, contexts=5))
    """),
    md("Find features by words in their contexts or promoted tokens; save an offline page."),
    code("""
    code_features = find_features(cards, ['def', 'class', 'return', 'import'])[:5]
    for feature in code_features[:3]:
        print(cards.describe(feature, contexts=2))
    page = cards.select([212, *code_features]).save_html(OUT / 'features.html')
    IFrame(page, width='100%', height=400)
    """),
    md("""
    ## Steer a generation with feature 212

    Steering adds the feature's decoder direction, `coefficient × its typical maximum
    activation`, at every position but the sink and at every cached generation step. The
    frequency table counts the share of generated tokens among the feature's 20 promoted tokens,
    unsteered, steered, and steered with a random live feature at the same coefficient.
    """),
    code("""
    prompt = 'The meeting was scheduled for'
    print('unsteered:', prompt + lm.generate(prompt, 20))
    with steer_with_sae_feature(lm, sae, 212, 4.0):
        print('feature 212 x4:', prompt + lm.generate(prompt, 20))
    alive = SAEStats.load(Path(sae.source) / 'stats.json').values > 0
    sampling = GenerationConfig(max_new_tokens=20 if QUICK else 30, top_p=0.9)
    table = steering_frequency(lm, sae, 212, neutral_prompts()[: 4 if QUICK else 30],
                               FrequencyConfig(generation=sampling), alive=alive)
    print(table.summary())
    """),
    md("""
    ## Clamp it

    Clamping sets the feature's activation and keeps the SAE's error term, so only that feature
    changes: x' = x + decode(f') − decode(f). Here feature 212 is set to zero where it fires and,
    the other way, to four times its typical maximum everywhere.
    """),
    code("""
    prompt = 'To use the class, you first need to instant'
    print('clean:        ', lm.top_tokens(prompt, k=5))
    with clamp_sae_feature(lm, sae, 212, 0.0, mode='where_active'):
        print('212 = 0:      ', lm.top_tokens(prompt, k=5))
    with clamp_sae_feature(lm, sae, 212, 4.0, mode='everywhere'):
        print('212 = 4 x max:', prompt + lm.generate(prompt, 15))
    """),
]

def _gallery() -> ModuleType:
    """examples/result_gallery.py, imported from beside this file."""
    spec = importlib.util.spec_from_file_location("result_gallery", Path(__file__).with_name("result_gallery.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _results_cells() -> list[Cell]:
    """The results notebook: result_gallery.py's imports and helpers, then per result type a
    heading and its builder, called as the cell's last expression so the notebook shows it."""
    gallery = _gallery()
    source = Path(__file__).with_name("result_gallery.py").read_text(encoding="utf-8")
    head = source.split("# ---------------------------------------------------------------------- builders")[0]
    head = head.split("from __future__ import annotations\n", 1)[1].strip()
    cells = [
        md("""
        # Every result type, shown by itself

        A notebook cell whose last expression is a result shows what a report section shows: its
        summary, its default plot, the table of its largest numbers and its provenance (`meta`,
        folded), all offline. Below, one result of each type: where an analysis runs in about a
        second on the two-layer toy model (random weights), the result comes from that run; the
        rest are synthetic numbers of a real run's shape (`meta.data_source` says so).
        """),
        code("import os\nos.environ.setdefault('HF_HUB_OFFLINE', '1')\n\n" + head + "\n\n\nlm = toy()\nlm"),
    ]
    for name, build in gallery.BUILDERS.items():
        doc = (RESULT_TYPES[name].__doc__ or "").strip().split("\n\n")[0]
        cells.append(md(f"## {name}\n\n" + " ".join(doc.split())))
        cells.append(code(inspect.getsource(build) + f"\n\n{build.__name__}(lm)"))
    return cells


KNOWLEDGE = [
    md("""
    # Where is a fact stored? "The Eiffel Tower is in Paris" in SmolLM2

    Four readings of one fact, each a few lines: the logit lens (when does " Paris" become the
    prediction?), direct logit attribution (which heads and MLPs write it?), the MLP as a
    key-value memory (which neurons' value vectors push " Paris" up, Geva et al. 2022), and
    knowledge neurons (integrated gradients over paraphrases, Dai et al. 2022), which we then
    suppress and enhance.
    """),
    setup("knowledge", "import torch", "from IPython.display import Image"),
    code("""
    from lmsci_mi.knowledge import (KnowledgeNeuronsConfig, SubUpdateConfig, enhance_neurons,
                                    knowledge_neurons, sub_updates, suppress_neurons, value_vectors)
    from lmsci_mi.lenses import direct_logit_attribution, logit_lens

    prompts = ['The Eiffel Tower is located in the city of',
               'The Eiffel Tower stands in the city of',
               'You can visit the Eiffel Tower in the city of']
    answer = ' Paris'
    """),
    md("""
    ## 1. The logit lens

    Each layer's residual stream read through the final norm and the unembedding: the answer's
    probability by layer and position, each cell labelled with the lens's top token.
    """),
    code("""
    lens = logit_lens(lm, prompts[0], answer)
    print(lens.summary(rows=lm.cfg.n_layers))
    lens.plot(OUT / 'logit_lens.png')
    Image(OUT / 'logit_lens.png')
    """),
    md("""
    ## 2. Direct logit attribution

    Every head's and MLP's direct contribution to the logit of " Paris", norm scales frozen at
    this run, so the parts sum to the logit.
    """),
    code("""
    dla = direct_logit_attribution(lm, prompts[0], answer)
    print(dla.summary())
    """),
    md("""
    ## 3. Sub-updates: the MLP as a key-value memory

    A neuron's contribution is its coefficient (`mlp_post`, which can be negative in a gated MLP)
    times its value vector's projection on " Paris".
    """),
    code("""
    updates = sub_updates(lm, prompts[0], SubUpdateConfig(target=answer))
    print(updates.summary())
    """),
    md("""
    ## 4. Knowledge neurons

    Integrated gradients of p(" Paris") with respect to every `mlp_post` neuron at the last
    position, on each paraphrase; the neurons that score above 0.2 of the maximum in most
    paraphrases are kept. Then we zero them (suppress) and double them (enhance).
    """),
    code("""
    neurons = knowledge_neurons(lm, prompts, answer, KnowledgeNeuronsConfig(steps=8 if QUICK else 20))
    print(neurons.summary())

    @torch.no_grad()
    def p_answer(prompt):
        return float(torch.softmax(lm(lm.to_tokens(prompt))[0, -1].float(), -1)[lm.token_id(answer)])

    found = list(neurons.neurons)
    with suppress_neurons(lm, found):
        suppressed = p_answer(prompts[0])
    with enhance_neurons(lm, found):
        enhanced = p_answer(prompts[0])
    print(f'p(answer) {p_answer(prompts[0]):.3f}; suppressed {suppressed:.3f}; enhanced {enhanced:.3f}')
    print(value_vectors(lm, *found[0]).summary())
    """),
    md("""
    One fact proves little: `benchmarks/knowledge_neurons.py` runs the same test over 30 facts
    against random neurons from the same layers, with intervals (docs/knowledge_neurons.md).
    """),
]

CONCEPTS = [
    md("""
    # Find a concept direction and steer with it

    Two ways to find a linear direction for a concept in SmolLM2-135M, and one way to use it:

    1. **Concept directions** (Park et al. 2024): from counterfactual word pairs (king → queen),
       the concept's direction in the unembedding space under the *causal inner product*.
    2. **Representation reading** (Zou et al. 2023): the first principal component of activation
       differences between contrasting prompts, per layer, the layer chosen on dev pairs.
    3. **Activation addition** (mean difference, ActAdd-style): a difference of means added to the residual stream
       with a coefficient, over an explicit position scope that holds under the KV cache.
    """),
    setup("concept_steering"),
    code("""
    from lmsci_mi.data.concepts import load_concept_pairs
    from lmsci_mi.representations import (causal_inner_product, concept_inner_products,
                                          concept_projections)

    concepts = load_concept_pairs(['male_female', 'verb_past', 'english_french'] if QUICK else None)
    inner = causal_inner_product(lm)  # Cov(γ) over the vocabulary, computed once
    print(concept_projections(lm, concepts, inner_product=inner).summary())
    """),
    md("""
    ## Causal versus Euclidean inner product

    Under the causal inner product, concepts that can vary independently (gender, tense,
    language) are close to orthogonal; under the Euclidean inner product of the raw unembedding
    they all share its dominant directions. Concepts that share their words (past, -ing and third
    person of the same verbs) stay aligned in both.
    """),
    code("""
    products = concept_inner_products(lm, concepts, inner_product=inner)
    print(products.summary())
    products.plot();
    """),
    md("""
    ## Reading sentiment layer by layer

    Positive and negative remarks on the same topics, each put in a LAT template. The reading
    vector is the first principal component of the pairs' activation differences (each pair's
    order randomised, as Zou et al. do); the layer is chosen on dev pairs and scored on test pairs,
    against the difference of means, a logistic probe and random directions.
    """),
    code("""
    from lmsci_mi.data.contrasts import contrast_pairs
    from lmsci_mi.representations import ReadingConfig, representation_reading

    pairs = contrast_pairs('sentiment', n_pairs=40 if QUICK else None)
    layers = tuple(range(0, lm.cfg.n_layers, 3)) if QUICK else None
    reading = representation_reading(lm, pairs, config=ReadingConfig(layers=layers))
    print(reading.summary())
    reading.plot();
    """),
    md("""
    ## Steer with a difference of means

    The mean residual over 100 positive remarks minus that over 100 negative ones, at layer 6,
    added at every position but the sink. VADER scores the sampled continuations from −1 to +1.
    """),
    code("""
    from lmsci_mi.data.steering_texts import neutral_prompts
    from lmsci_mi.generation import GenerationConfig, generate
    from lmsci_mi.steering import MeanDifferenceConfig, mean_difference_vector
    from lmsci_mi.steering.evaluate import sentiment_scores

    remarks = contrast_pairs('sentiment', template=False)
    vector = mean_difference_vector(lm, remarks.positive, remarks.negative,
                                    MeanDifferenceConfig(layer=6, read='mean'))
    print(vector.summary())
    prompts = list(neutral_prompts()[: 4 if QUICK else 16])
    sampling = GenerationConfig(max_new_tokens=20, top_p=0.9)
    for coefficient in (0.0, 2.0, 4.0):
        with vector.apply(lm, coefficient):
            texts = generate(lm, prompts, sampling).texts
        print(f'{coefficient:+.0f} x vector: mean VADER {sum(sentiment_scores(texts)) / len(texts):+.2f}'
              f'  {prompts[0]}{texts[0]!r}')
    """),
    md("""
    ## Which positions are steered

    The first new token is predicted from the last prompt position, so "steer the generated
    tokens" leaves it alone while "steer from the last prompt token on" changes it. Under the KV
    cache each step feeds one position per row; the scope is applied per row and per step.
    """),
    code("""
    from lmsci_mi.hooks import PositionScope

    greedy = GenerationConfig(max_new_tokens=8, temperature=0)
    plain = generate(lm, prompts[:1], greedy, keep_logits=True)
    first = plain.logits[0][0].softmax(-1)
    top = int(first.argmax())
    print(f'       unsteered: p({lm.tokenizer.decode([top])!r}) first {float(first[top]):.3f}', repr(plain.texts[0]))
    for scope in (PositionScope.generated(), PositionScope.from_last_prompt()):
        with vector.apply(lm, 4.0, scope):
            out = generate(lm, prompts[:1], greedy, keep_logits=True)
        p = float(out.logits[0][0].softmax(-1)[top])
        print(f'{scope.kind:>16}: p({lm.tokenizer.decode([top])!r}) first {p:.3f}', repr(out.texts[0]))
    """),
    md("""
    `benchmarks/concepts.py`, `benchmarks/reading.py` and `benchmarks/steering_compare.py` run
    these on the full data with intervals (docs/representations.md), the last one putting the
    difference-of-means vector beside LM-Steer and an SAE feature on the same prompts and seeds.
    """),
]

ICL = [
    md("""
    # In-context learning: which heads do it, and how

    After Han, Wang, Zhao & Ji, "Explaining Emergent In-Context Learning as Kernel Regression"
    (arXiv:2305.12766), and the tutorial it grew into (Han & Ji, AAAI-25), on SmolLM2-135M:

    1. **ICL prompt sets**: demonstrations `[x_1, y_1, delim, …, x_n, y_n, delim, x_test]` with the
       token span of every part, drawn with a seed, split into dev and held-out items.
    2. **Kernel-regression heads**: a head whose attention from the test position, summed per
       label over the demonstrations, predicts the model's answer; chosen on dev, reported on
       held-out, beside the model's ICL accuracy.
    3. **A task vector** (Hendel et al. 2023): the ICL prompt's last state, put into a zero-shot
       prompt, layer by layer, against a random vector of the same norm.
    4. **A transformer that learns regression in context** (Garg et al. 2022), against least
       squares, ridge, one step of gradient descent and nearest neighbours.
    """),
    setup("icl"),
    code("""
    from lmsci_mi.icl import ICLPromptConfig, icl_prompts

    TASKS = ('sentiment', 'animal_plant', 'parity')
    config = ICLPromptConfig(n_demonstrations=8, n_prompts=12 if QUICK else 60)
    prompts = {task: {split: icl_prompts(lm, task, config, split=split) for split in ('dev', 'held_out')}
               for task in TASKS}
    p = prompts['sentiment']['held_out'][0]
    print(p.text)
    print('expected answer:', repr(p.answer), '| label words:', p.label_words)
    first = p.demonstrations[0]
    for part in ('input', 'label', 'delimiter'):
        span = getattr(first, part)
        print(f'{part:>9}: tokens {span.start}-{span.stop - 1}',
              [lm.tokenizer.decode([t]) for t in p.tokens[span.start:span.stop]])
    """),
    md("""
    ## Kernel-regression heads, and the head map

    One forward pass per batch keeps every head's attention row at the test position. Each
    demonstration's weight is the largest attention inside its span `[x_i, y_i]` (the paper's,
    `span_max`) or the attention on its label token (the tutorial's, `label`); a head's prediction
    is the label with the largest summed weight. The map: attention on the label tokens, and how
    often each head's prediction agrees with the model's answer, on held-out prompts.
    """),
    code("""
    from lmsci_mi.icl import KernelRegressionConfig, kernel_regression_heads

    # Pearson r needs a standalone run of every item: left out in quick mode.
    kr_config = KernelRegressionConfig(pearson=not QUICK)
    heads = {task: {split: kernel_regression_heads(lm, sets[split], kr_config) for split in sets}
             for task, sets in prompts.items()}
    heads['sentiment']['held_out'].plot();
    """),
    md("""
    ## The kernel-regression table

    The tutorial's table: per task, the model's ICL accuracy, a kernel regression on an offline
    similarity (character 3-grams; the tutorial's sentence-embedding rows are not comparable),
    and the heads chosen on dev (each task's best, and the best over tasks) reported on held-out,
    with 95 % Wilson intervals.
    """),
    code("""
    from lmsci_mi.icl import choose_kr_heads, kr_table

    choice = choose_kr_heads({task: runs['dev'] for task, runs in heads.items()})
    table = kr_table(choice, {task: runs['held_out'] for task, runs in heads.items()})
    print(table.summary())
    if not QUICK:
        r = heads['sentiment']['held_out'].pearson('logit')
        print(f'largest Pearson r (attention logit vs predicted similarity): {float(r.nan_to_num(-1).max()):.2f}')
    """),
    md("""
    ## A task vector

    Hendel et al.'s task vector: the last token's residual stream after block L of an antonyms ICL
    prompt *replaces* that state in a zero-shot prompt. The curve is the share of the ICL gain
    over zero-shot it recovers, by layer, against a random vector of the same norm; the layer is
    chosen on dev and the figures are held-out.
    """),
    code("""
    from lmsci_mi.icl import TaskVectorConfig, task_vector_recovery

    layers = tuple(range(0, lm.cfg.n_layers, 3)) if QUICK else None
    vectors = task_vector_recovery(lm, 'antonyms', TaskVectorConfig(n_prompts=8 if QUICK else 50, layers=layers))
    print(vectors.summary())
    vectors.plot();
    """),
    md("""
    ## A transformer that learns regression in context

    A small GPT trained on prompts `x_1, y_1, …, x_n, y_n` with `y = w·x + noise` and a fresh `w`
    per prompt. The default model trains 10,000 steps on the CPU (about 20 minutes at one thread)
    once, then loads from the cache; quick mode trains 200 steps. Its squared error per number of
    examples, beside least squares, ridge, one gradient step, nearest neighbours and averaging.
    """),
    code("""
    from lmsci_mi.icl import ICLRegressionConfig, evaluate_regression, load_regression_model

    regression = ICLRegressionConfig(steps=200, warmup=20) if QUICK else ICLRegressionConfig()
    model, record = load_regression_model(regression)
    evaluation = evaluate_regression(model, regression, n_prompts=200 if QUICK else 1000,
                                     n_dev=200 if QUICK else 1000)
    n = 2 * regression.d
    print(f'trained {record["run"]["steps"]} steps in {record["run"]["seconds"]:.0f} s; '
          f'model / least squares at n = {n}: {evaluation.error_ratio(n)}')
    evaluation.errors.plot();
    """),
    md("""
    The squared prediction difference (Akyürek et al. 2022) says which algorithm the model's
    predictions are closest to as the number of examples grows.
    """),
    code("""
    evaluation.differences.plot();
    """),
    md("""
    `benchmarks/icl_kernel.py`, `benchmarks/icl_vectors.py` and `benchmarks/icl_regression.py`
    run these on every task and both bundled models, with intervals (docs/icl.md); from the
    command line, `lmsci-mi icl kernel|vectors|regression` does each.
    """),
]

OUTLIERS = [
    md("""
    # Outliers: massive activations, super weights, sinks, and what breaks past the trained length

    On SmolLM2-135M (loaded with its `<|endoftext|>` sink token in front of every text, as
    lmsci-mi does by default), after Sun et al. 2024 (arXiv:2402.17762), Yu et al. 2024
    (arXiv:2411.07191), Xiao et al. 2024 (arXiv:2309.17453) and LM-Infinite (Han et al., NAACL
    2024, arXiv:2308.16137):

    1. **Massive activations**: where they are, at which positions and on which tokens.
    2. **Super-weight candidates**: Yu et al.'s one-pass search of the MLP down-projections.
    3. **Their causal role**: zeroing them against random coordinates of the same layers (or
       random weights of equal magnitude), on held-out text, the fact set and IOI.
    4. **Sink heads** with and without the sink token, and what masking the first token costs.
    5. **Length**: a small model trained here at 256 tokens, read to 8 times that, with and
       without LM-Infinite's Λ-shaped mask; and the first tokens' separation in SmolLM2.

    The text is the standard library's prose (docstrings and `pydoc_data` topics), offline.
    """),
    setup("outliers", "from IPython.display import Image"),
    code("""
    from lmsci_mi.outliers import find_massive_activations, long_text

    text = long_text(lm, 4 if QUICK else 32, 128)  # rows 0.. of 128 tokens, the sink first
    massive = find_massive_activations(lm, text.tokens)  # Sun et al.'s rule: |a| > 100 and >= 1,000 x median
    print(text.source)
    print(massive.summary(rows=6))
    massive.plot(OUT / 'massive.png')
    Image(OUT / 'massive.png')
    """),
    md("""
    ## Which tokens carry them

    The rule is the paper's; at 135M parameters its absolute part (100) may not trigger, so the
    cell falls back to the ratio alone and says so, rather than changing the definition. Position 0
    is the sink token here: a "first token" finding on this model is a finding about the sink.
    """),
    code("""
    rule = 'paper' if massive.selected('paper') else 'ratio'
    print(f'rule: {rule}; sink at position 0 in {sum(massive.sink_at_zero)} of {massive.n_texts} texts')
    for role, (hits, having) in massive.role_counts(rule).items():
        print(f'{role:>14}: entries in {hits} of {having} texts')
    print('tokens carrying entries (texts):', massive.token_counts(rule).most_common(6))
    massive.dimension_frame().sort_values('cv').head(8)
    """),
    md("""
    ## Super-weight candidates

    One forward pass on Yu et al.'s prompt reads every down-projection's input and raw output; a
    layer where both spike points at one weight `W_down[row, col]`. It is zeroed, the pass
    repeated, and every weight restored bit for bit at the end. (The paper's rule is |value| > 50;
    the cell falls back to our ratio rule when it finds nothing, and says so.)
    """),
    code("""
    from lmsci_mi.outliers import SuperWeightConfig, find_super_weights

    weights = find_super_weights(lm, SuperWeightConfig(max_candidates=1 if QUICK else 2))
    if not weights.candidates:
        print('no candidate by the paper threshold; the ratio rule instead')
        weights = find_super_weights(lm, SuperWeightConfig(max_candidates=1 if QUICK else 2, rule='ratio'))
    print(weights.summary(rows=0))
    weights.plot(OUT / 'super_weights.png')
    Image(OUT / 'super_weights.png')
    """),
    md("""
    ## Zeroing them, against random

    The massive activations are zeroed at the first layer where each dimension carries one (Sun
    et al. intervene at LLaMA2-7B's layer 2, where theirs appear), at the positions and tokens
    that carry them; each super weight is zeroed, and zeroed with its super activation restored
    (Yu et al.'s `removeSW_restoreSA`). Each beside as many random dimensions of the same layers,
    or random weights of equal magnitude in the same matrix. Perplexity on chunks 64.. of the
    prose (the outliers were found on chunks 0..31), accuracy on the fact and IOI sets.
    """),
    code("""
    from lmsci_mi.outliers import (MassiveActivationAblation, OutlierAblationConfig, OutlierPositions,
                                   SuperWeightRestoreActivation, SuperWeightScaling, outlier_ablations)

    first = {}
    for entry in massive.selected(rule):
        first[entry.dim] = min(entry.layer, first.get(entry.dim, entry.layer))
    coords = tuple(sorted((layer, dim) for dim, layer in first.items()))
    where = OutlierPositions.from_exclude(massive.exclude(rule)) if coords else OutlierPositions()
    plan = {f'zero {len(coords)} massive': MassiveActivationAblation(coords, where)} if coords else {}
    for c in weights.coordinates():
        plan[f'zero SW {c}'] = SuperWeightScaling((c,), 0.0)
        plan[f'zero SW {c}, restore SA'] = SuperWeightRestoreActivation(c, where)
    print('massive activations:', coords, '| at', where.describe())
    config = OutlierAblationConfig(n_texts=4 if QUICK else 16, seq_len=128, text_start=64, n_reference_texts=4 if QUICK else 8,
                                   n_control_draws=1 if QUICK else 3, n_facts=8 if QUICK else None,
                                   n_ioi=4 if QUICK else 40)
    if plan:
        ablations = outlier_ablations(lm, plan, config)
        print(ablations.summary())
        ablations.plot(OUT / 'ablations.png')
    else:
        print('nothing found to ablate')
    Image(OUT / 'ablations.png') if plan else None
    """),
    md("""
    ## Sink heads, with and without the sink token

    Each head's mean attention on the first position, on the same rows with the sink token in
    front and with it removed (so the first position is then the text's first word).
    """),
    code("""
    from matplotlib.figure import Figure

    from lmsci_mi.outliers import SinkScoreConfig, sink_heads

    sinks = sink_heads(lm, SinkScoreConfig(n_texts=4 if QUICK else 32))
    print(sinks.summary(rows=6))
    fig = Figure(figsize=(9, 3.6), layout='constrained')
    for ax, i in zip(fig.subplots(1, 2), (0, 1)):
        image = ax.imshow(sinks.values[i].T.numpy(), vmin=0, vmax=1, aspect='auto', cmap='viridis')
        ax.set(title=f'{sinks.labels[0][i]}: mass on position 0', xlabel='layer', ylabel='head')
    fig.colorbar(image, ax=fig.axes)
    fig.savefig(OUT / 'sinks.png')
    Image(OUT / 'sinks.png')
    """),
    md("""
    Masking attention to the first token in the three strongest sink heads, alone and together,
    against as many random heads and against every head; held-out rows after the scored ones,
    NLL changes with 95 % paired bootstrap intervals.
    """),
    code("""
    from lmsci_mi.outliers import FirstTokenMaskConfig, first_token_mask_effect

    top = [head for head, _ in sinks.top(3)]
    mask = first_token_mask_effect(lm, top, FirstTokenMaskConfig(
        n_texts=4 if QUICK else 32, skip_texts=sinks.n_texts, n_random_draws=1 if QUICK else 5))
    print(mask.summary())
    """),
    md("""
    ## Past the trained length, with and without the Λ-mask

    SmolLM2 was trained to 8,192 tokens: twice that is minutes per text on a CPU
    (`lmsci-mi outliers length` runs it). Here a small byte-level model trained on this machine
    at 256 tokens (`lmsci_mi.outliers.short_context_lm`; the full model trains once, about 20
    minutes at one thread, then loads from the cache; quick mode trains a tiny one for seconds)
    is read on held-out rows of 8 times its training length. LM-Infinite's mask keeps the first
    10 tokens (the paper's 10–100; 10 of a 256-token window here) and a window of the training
    length, with distances capped there.
    """),
    code("""
    from lmsci_mi.outliers import LambdaMaskConfig, NLLByPositionConfig, lambda_mask, nll_by_position
    from lmsci_mi.outliers.short_context_lm import ShortLMConfig, heldout_rows, load_short_context_lm

    short_config = (ShortLMConfig(n_layers=2, d_model=32, n_heads=2, n_key_value_heads=1, d_mlp=64, context=32,
                                  steps=40, batch_size=8, warmup=5) if QUICK else ShortLMConfig())
    short, record = load_short_context_lm(short_config)
    context = record['trained_context']
    rows = heldout_rows(short, 4 if QUICK else 16, config=short_config)  # 8 x the training length
    nll_config = NLLByPositionConfig(window=context // 2, in_context_start=context // 8, in_context_stop=context)
    curves = {'no mask': nll_by_position(short, rows, nll_config)}
    with lambda_mask(short, LambdaMaskConfig(local_window=context, n_global=10)):
        curves['Λ-mask'] = nll_by_position(short, rows, nll_config)
    print(f"{record['run']['steps']} training steps at {context} tokens; {rows.shape[0]} held-out rows of {rows.shape[1]}")
    for name, curve in curves.items():
        rise = curve.rise
        print(f'{name}: in-context mean NLL {rise.in_context_mean:.3f} nats/byte; starts to rise at',
              rise.length or f'no length up to {rows.shape[1]}')
    """),
    code("""
    import torch

    fig = Figure(figsize=(7, 3.6), layout='tight')
    ax = fig.subplots()
    width = max(1, context // 8)
    for name, curve in curves.items():
        binned = curve.values[1:].unfold(0, width, width).mean(1)
        ax.plot(torch.arange(len(binned)) * width + width / 2, binned.numpy(), label=name)
    ax.axvline(context, color='grey', linestyle=':', label=f'training length {context}')
    ax.set(xlabel='position', ylabel=f'NLL (nats/byte), mean over {rows.shape[0]} rows', title='NLL by position')
    ax.legend()
    fig.savefig(OUT / 'nll_by_position.png')
    Image(OUT / 'nll_by_position.png')
    """),
    md("""
    Why: LM-Infinite's diagnostics on the same rows. The largest attention logit grows with the
    query-key distance past what training showed, and attention entropy grows with the number of
    tokens attended; under the mask both stay at their in-range values.
    """),
    code("""
    from lmsci_mi.outliers import attention_length_curves

    unmasked = attention_length_curves(short, rows[:2])
    with lambda_mask(short, LambdaMaskConfig(local_window=context, n_global=10)):
        masked = attention_length_curves(short, rows[:2])
    fig = Figure(figsize=(10, 3.6), layout='tight')
    last = short.cfg.n_layers - 1
    titles = {'max_logit': ('query-key distance', 'largest attention logit (running max)'),
              'entropy': ('query position', 'attention entropy (nats, mean over heads)')}
    for ax, (kind, (xlabel, title)) in zip(fig.subplots(1, 2), titles.items()):
        for name, result in (('no mask', unmasked), ('Λ-mask', masked)):
            ax.plot(getattr(result, kind).values[last].numpy(), label=f'{name}, layer {last}')
        ax.axvline(context, color='grey', linestyle=':')
        ax.set(xlabel=xlabel, title=title)
        ax.legend(fontsize=8)
    fig.savefig(OUT / 'attention_length.png')
    Image(OUT / 'attention_length.png')
    """),
    md("""
    The first tokens occupy their own region of feature space (LM-Infinite's third diagnostic): in
    SmolLM2, each layer's distance of the first four positions (the sink among them) from the other
    positions' centroid, in units of the others' spread.
    """),
    code("""
    from lmsci_mi.outliers import first_token_separation

    separation = first_token_separation(lm, long_text(lm, 2 if QUICK else 4, 128 if QUICK else 1024))
    separation.plot(OUT / 'separation.png')
    print('largest separation: layer', int(separation.values.argmax()), f'{float(separation.values.max()):.1f} spreads')
    Image(OUT / 'separation.png')
    """),
    md("""
    From the command line: `lmsci-mi outliers massive|super-weights|sinks|mask|ablate|length` and
    `lmsci-mi heads --kind sink`; `examples/outliers.py` runs these steps as a script.
    """),
]

GRAPHS = [
    md("""
    # Tracing a feature circuit with an attribution graph

    An attribution graph explains one next-token prediction through sparse features: each MLP is
    replaced by a transcoder, attention and norms are frozen from the clean run, and what the
    transcoders miss stays as error nodes (Ameisen et al. 2025; the algorithm of circuit-tracer
    0.5, checked against it entry by entry in `docs/graphs.md`). Here on the GPT trained on a
    context-free grammar, whose transcoders ship with lmsci-mi, so nothing trains.
    """),
    code("""
    import os
    os.environ.setdefault('HF_HUB_OFFLINE', '1')  # nothing here needs a network
    from pathlib import Path

    from lmsci_mi.circuits.graphs import attribution_graph, feature_intervention
    from lmsci_mi.cli.graphs import cfg_sentence_prompt
    from lmsci_mi.config import quick_mode
    from lmsci_mi.probes.cfg.model import load_cfg_model
    from lmsci_mi.transcoders import load_transcoders

    QUICK = quick_mode()  # LMSCI_MI_QUICK=1: the same steps (this notebook is small either way)
    OUT = Path('out/graphs')
    OUT.mkdir(parents=True, exist_ok=True)
    cfg = load_cfg_model(train=False)[0]  # the shipped CFG GPT: 4 layers, d_model 128
    transcoders = load_transcoders(cfg)   # its shipped transcoders, one per layer
    transcoders
    """),
    md("""
    ## One sentence's graph

    A held-out grammar sentence without its last token, BOS first: the graph explains the
    prediction of that token. Its nodes are the active features, one error node per layer and
    position, the tokens and the logit targets; its edges are direct effects in the frozen
    replacement model.
    """),
    code("""
    prompt = cfg_sentence_prompt(0)
    graph = attribution_graph(cfg, transcoders, prompt)
    print(graph.summary())
    graph.scores()
    """),
    md("""
    ## The viewer

    Pruned harder than circuit-tracer's thresholds (80 % of the influence on the logits for
    nodes, 98 % for edges, `graph.viewer()`'s default, keep hundreds of nodes and thousands of edges here) so
    that the cell stays small: 60 % and 90 %. Hover a node for its details, move the sliders to
    show more nodes or fewer edges, click a node to follow its paths.
    `view.save(OUT / 'graph.html')` writes the same view as a page that opens offline.
    """),
    code("""
    view = graph.viewer(node_threshold=0.6, edge_threshold=0.9)
    view.save(OUT / 'graph.html')
    view
    """),
    md("""
    ## Testing the graph's claim

    The feature with the most influence on the logits should matter on the real model: set it to
    zero at its position and watch the logit of the predicted token (the real model runs on; no
    freezing). A graph claim that does not survive this is a claim about the replacement only.
    """),
    code("""
    n_features = graph.layout.n_features
    influence = graph.node_influence()[:n_features]
    top = int(influence.argmax())
    layer, position, feature = (int(v) for v in graph.features[top])
    effect = feature_intervention(cfg, transcoders, prompt, [(layer, position, feature, 0.0)],
                                  token_ids=graph.logit_tokens.tolist())
    print(f'feature L{layer} pos {position} #{feature} (activation {float(graph.activations[top]):.2f})')
    print('logit change of the targets:', [round(float(v), 3) for v in effect.values])
    print('probability change:', [round(float(v), 4) for v in effect.probability_change])
    """),
    md("""
    On SmolLM2 the same two calls work once its transcoders exist: `load_transcoders(lm,
    build=True)` trains them (about 1.5 hours at one CPU thread, resumable per layer), and
    `lmsci-mi graph --prompt ... --html graph.html` draws a graph from the command line;
    `examples/feature_circuits.py` runs this notebook's steps as a script.
    """),
]

NOTEBOOKS = [
    Notebook("circuits", "script a circuit discovery", "circuit_discovery.py", CIRCUITS),
    Notebook("edit_fact", "edit a fact in a model", "edit_fact.py", EDIT),
    Notebook("heads", "visualise heads in a notebook", "visualise_heads.py", HEADS),
    Notebook("probes", "export probe results", "export_probes.py", PROBES),
    Notebook("steer", "steer with LM-Steer", "steer_sentiment.py", STEER),
    Notebook("sae", "find and steer SAE features", "sae_features.py", SAE),
    Notebook("knowledge", "where is this fact stored", "where_is_the_fact.py", KNOWLEDGE),
    Notebook("concept_steering", "find a concept direction and steer with it", "concept_steering.py", CONCEPTS),
    Notebook("icl", "find the heads that do in-context learning", "in_context_learning.py", ICL),
    Notebook("outliers", "find the outliers of the forward pass and see length fail", "outliers.py", OUTLIERS),
    Notebook("graphs", "trace a feature circuit with an attribution graph", "feature_circuits.py", GRAPHS),
    Notebook("results", "see every result in a notebook", "result_gallery.py", _results_cells()),
]


def build(cells: list[Cell]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.cells = [
        new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--execute", action="store_true", help="run each notebook and keep outputs")
    parser.add_argument("--only", nargs="+", choices=[nb.name for nb in NOTEBOOKS], default=None)
    args = parser.parse_args()
    for notebook in NOTEBOOKS:
        if args.only is not None and notebook.name not in args.only:
            continue
        if notebook.cells is None:
            print(f"skipped {notebook.name} ({notebook.story}): pending, {notebook.pending}")
            continue
        path = Path(__file__).with_name(f"{notebook.name}.ipynb")
        nb = build(notebook.cells)
        if args.execute:
            from nbclient import NotebookClient

            NotebookClient(
                nb,
                timeout=1200,
                kernel_name="python3",
                resources={"metadata": {"path": str(path.parent)}},
            ).execute()
        nbformat.write(nb, path)
        print("wrote", path)


if __name__ == "__main__":
    main()
