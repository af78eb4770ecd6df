"""Unfamiliar prompts: few in distribution, everyday and foreign-script requests recognised,
and none sent to the cloud first merely for being unlike the training data."""

from __future__ import annotations

import numpy as np
import pytest

from serving import Router

EVERYDAY = [
    "hi",
    "Hello! How are you today?",
    "thanks a lot",
    "Thank you, that was helpful.",
    "good morning",
    "What is 7 + 5?",
    "what's 12 times 9",
    "Convert 5 miles to kilometers.",
    "How many ounces in a pound?",
    "Translate 'good night' into French.",
    "How do you say thank you in Spanish?",
    "你好",
    "谢谢你的帮助",
    "今天天气怎么样？",
    "请把这句话翻译成英文：我喜欢学习。",
    "Set a timer for 10 minutes",
    "What day is it tomorrow if today is Monday?",
]


@pytest.fixture(scope="module")
def full_router(trained_full):
    return Router.load(trained_full.bundle, strict=True)


def test_few_in_distribution_prompts_are_unfamiliar(trained_full):
    test = trained_full.metrics["test"]
    assert 0.0 < test["unfamiliar_share"] <= 0.05, test["unfamiliar_share"]


def test_sdk_novelty_is_the_training_pipelines(trained_full, full_router):
    test = trained_full.test
    decisions = full_router.route_batch(list(test.prompts[:300]), list(test.precisions[:300]))
    assert np.max(np.abs(np.array([d.novelty for d in decisions]) - test.novelty[:300])) <= 1e-6
    assert [d.unfamiliar for d in decisions] == list(test.unfamiliar[:300])


def test_everyday_requests_are_never_cloud_first_for_being_unfamiliar(full_router):
    decisions = [full_router.route(p) for p in EVERYDAY]
    for prompt, d in zip(EVERYDAY, decisions):
        if d.unfamiliar:
            assert d.zone == "edge_with_cloud_fallback" and "unfamiliar prompt" in d.reason, (prompt, d)
    chinese = [d for p, d in zip(EVERYDAY, decisions) if not p.isascii()]
    assert all(d.unfamiliar for d in chinese), [(d.novelty, d.reason) for d in chinese]


def test_the_unfamiliar_policy_is_the_callers_choice(trained_full):
    prompt = "请把这句话翻译成英文：我喜欢学习。"
    ruled = Router.load(trained_full.bundle, unfamiliar_policy="rule_table").route(prompt)
    assert ruled.unfamiliar and "rule table score" in ruled.reason and ruled.zone == "edge"
    learned = Router.load(trained_full.bundle, unfamiliar_policy="learned").route(prompt)
    assert learned.unfamiliar and "learned zone kept" in learned.reason
    with pytest.raises(ValueError, match="unfamiliar_policy"):
        Router.load(trained_full.bundle, unfamiliar_policy="coin_flip")


def test_one_prompt_scores_to_the_last_bit_as_in_a_batch():
    """route() and route_batch() must agree exactly: the one-prompt path sums as the batch does."""
    from serving.scoring._novelty import Novelty

    rng = np.random.default_rng(0)
    dim, vocab = 32, 500
    reference = Novelty(
        rng.normal(size=dim),
        rng.uniform(0.1, 3.0, size=dim),
        rng.integers(0, 2, size=vocab),
        embedding_threshold=1.7,
        unseen_threshold=0.4,
    )
    embeddings = rng.normal(scale=2.0, size=(400, dim)).astype(np.float32)
    lengths = rng.integers(0, 60, size=400)
    ids = rng.integers(0, vocab + 50, size=int(lengths.sum()))  # ids past the table are clipped
    batch = reference.scores_flat(embeddings, ids, lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    one_by_one = [reference.score_one(embeddings[i], ids[s : s + n]) for i, (s, n) in enumerate(zip(starts, lengths))]
    assert one_by_one == batch.tolist()


def test_scoring_in_chunks_gives_each_row_the_same_figures():
    from serving.scoring._novelty import Novelty

    rng = np.random.default_rng(1)
    reference = Novelty(
        rng.normal(size=8),
        rng.uniform(0.5, 2.0, size=8),
        rng.integers(0, 2, size=100),
        embedding_threshold=1.0,
        unseen_threshold=0.5,
    )
    embeddings, lengths = rng.normal(size=(101, 8)), rng.integers(0, 9, size=101)
    ids = rng.integers(0, 120, size=int(lengths.sum())).astype(np.uint16)
    whole = reference.components_flat(embeddings, ids, lengths)
    for chunk_rows in (1, 7, 100, 101):
        chunked = reference.components_flat(embeddings, ids, lengths, chunk_rows=chunk_rows)
        assert [c.tolist() for c in chunked] == [w.tolist() for w in whole]


def _reference_in_graph(model_path):
    """The familiarity reference a bundle's graph holds (training.novelty.append_to_graph's
    constants), as serving.scoring._novelty.Novelty."""
    import onnx
    from onnx import numpy_helper

    from serving.scoring._novelty import Novelty

    values = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(str(model_path)).graph.initializer
        if i.name.startswith("novelty_")
    }
    return Novelty(
        values["novelty_mean"],
        1.0 / values["novelty_inverse_scale"],
        values["novelty_seen"],
        embedding_threshold=float(values["novelty_embedding_threshold"]),
        unseen_threshold=float(values["novelty_unseen_threshold"]),
    )


def test_a_bundle_with_the_reference_as_a_file_decides_as_the_one_graph(trained_small, tmp_path):
    """The fused bundle computes the novelty in its graph; the same reference written the older
    way (novelty.npz beside a graph without the novelty output, as bundles before it were)
    loads and gives every prompt the same novelty and the same decision, hard strings included."""
    import dataclasses

    import onnx

    from serving.bundle._bundle import read_manifest
    from training.writer import write_bundle

    _, result = trained_small
    manifest = read_manifest(result.bundle)
    reference = _reference_in_graph(result.bundle / "model.onnx")
    graph = onnx.load(str(result.bundle / "model.onnx"))
    kept = [o.name for o in graph.graph.output if o.name != manifest.novelty["output"]]
    older = onnx.utils.Extractor(graph).extract_model([i.name for i in graph.graph.input], kept)
    section = {k: v for k, v in manifest.novelty.items() if k not in ("in_model", "output")}
    files = {name: result.bundle / name for name in manifest.files if name != "model.onnx"}
    files.update({"model.onnx": older.SerializeToString(), "novelty.npz": reference.to_bytes()})
    folder = write_bundle(
        tmp_path / "older", files, dataclasses.replace(manifest, novelty={**section, "file": "novelty.npz"})
    )

    prompts = ["", "   ", "hi", "你好", "🤖" * 40, "x" * 5000, *EVERYDAY, *list(result.test.prompts[:100])]
    one_graph, with_file = Router.load(result.bundle, strict=True), Router.load(folder, strict=True)
    assert with_file._routing._scorer.novelty is not None and one_graph._routing._scorer.novelty is None
    for batch in (one_graph.route_batch(prompts), [one_graph.route(p) for p in prompts]):
        older_decisions = with_file.route_batch(prompts)
        assert (
            np.max(np.abs(np.array([d.novelty for d in batch]) - np.array([d.novelty for d in older_decisions])))
            <= 1e-9
        )
        assert [(d.zone, d.unfamiliar) for d in batch] == [(d.zone, d.unfamiliar) for d in older_decisions]


def test_a_manifest_whose_novelty_output_the_graph_lacks_is_refused(trained_small, tmp_path):
    import dataclasses

    from serving.bundle._bundle import BundleError, read_bundle, read_manifest
    from serving.scoring._scorer import Scorer
    from training.writer import write_bundle

    _, result = trained_small
    manifest = read_manifest(result.bundle)
    folder = write_bundle(
        tmp_path / "renamed",
        {name: result.bundle / name for name in manifest.files},
        dataclasses.replace(manifest, novelty={**manifest.novelty, "output": "familiarity"}),
    )
    with pytest.raises(BundleError, match="novelty output 'familiarity' is not an output of the model"):
        Scorer(read_bundle(folder))
