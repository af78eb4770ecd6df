"""Export the router's LightGBM heads to ONNX (calibration folded in) and fuse them with the
static encoder."""

from __future__ import annotations

MARGINS_OUTPUT = "lexical_margins"  # the tensor of the lexical margins alone (training.lexical's), what a blend reads


def heads_to_onnx(heads, n_features: int) -> tuple[bytes, list[str]]:
    """One graph from `features` to one output per head, `{name}_probabilities` [n, 2] (column 1
    the head's probability), and those output names. A bundle from before heads had one
    unnamed head whose output is `probabilities`; `cloud_needed` keeps that name. Heads with a
    lexical blend (training.model.LexicalBlend) read a second input, the lexical margins
    (MARGINS_OUTPUT), and mix them in (`_blend_nodes`)."""
    import onnx
    from onnx import compose, helper

    if [h.name for h in heads] == ["cloud_needed"]:
        return booster_to_onnx(heads[0].booster, n_features, heads[0].calibration), ["probabilities"]
    parts = [
        compose.add_prefix(
            onnx.load_from_string(booster_to_onnx(h.booster, n_features, h.calibration, side=h.side)),
            f"{h.name}_",
            rename_inputs=False,
        )
        for h in heads
    ]
    for head, part in zip(heads, parts):  # every head reads the one shared `features` input
        _rename_input(part.graph, f"{head.name}_features", "features")
    features = helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, [None, n_features])
    inputs, nodes = [features], [n for p in parts for n in p.graph.node]
    initializers = [i for p in parts for i in p.graph.initializer]
    blended = [(head, part) for head, part in zip(heads, parts) if head.blend is not None]
    if blended:
        width = len(blended[0][0].blend.names)
        inputs.append(helper.make_tensor_value_info(MARGINS_OUTPUT, onnx.TensorProto.FLOAT, [None, width]))
        for head, part in blended:
            output = part.graph.output[0].name
            for node in part.graph.node:
                node.output[:] = [f"{head.name}_trees" if o == output else o for o in node.output]
            new_nodes, new_initializers = _blend_nodes(head, output, MARGINS_OUTPUT)
            nodes.extend(new_nodes)
            initializers.extend(new_initializers)
    graph = helper.make_graph(nodes, "heads", inputs, [p.graph.output[0] for p in parts], initializer=initializers)
    model = helper.make_model(graph, opset_imports=parts[0].opset_import, producer_name="edge-cloud-router")
    model.ir_version = parts[0].ir_version
    if blended:  # Slice takes its bounds as inputs from opset 10
        _default_opset_at_least(model, 13)
    onnx.checker.check_model(model)
    return model.SerializeToString(), [o.name for o in model.graph.output]


class Ops:
    """ONNX nodes one a line: `add(kind, "input input", "output", **attributes)`, each tensor named
    `prefix`_name but the graph's own (`outside`) and the constants `const` adds (initializers
    `prefix`_name, appended to `initializers`), in the order they are written."""

    def __init__(self, prefix: str, outside=(), initializers=None):
        self.prefix, self.outside, self.nodes = prefix, set(outside), []
        self.initializers = [] if initializers is None else initializers

    def name(self, name: str) -> str:
        return name if name in self.outside or name.startswith(f"{self.prefix}_") else f"{self.prefix}_{name}"

    def const(self, name: str, value, dtype) -> str:
        import numpy as np
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), f"{self.prefix}_{name}"))
        return f"{self.prefix}_{name}"

    def add(self, kind: str, inputs: str, outputs: str, **attributes) -> None:
        from onnx import helper

        names = ([self.name(n) for n in names.split()] for names in (inputs, outputs))
        self.nodes.append(helper.make_node(kind, *names, **attributes))


EXPECTED_OUTPUT = "expected"  # an N-endpoint bundle's output: [n, endpoints] calibrated probabilities


def endpoint_heads_to_onnx(heads, n_features: int) -> bytes:
    """heads_to_onnx's graph for N endpoints' heads (training.model.Head, in the endpoints'
    order; their names only name graph tensors), with one output instead of one per head:
    `expected` [n, N], column k head k's calibrated probability. Calibration must fold into the
    trees (Platt) or be none: the SDK applies none outside the graph for these bundles."""
    import numpy as np
    import onnx
    from onnx import helper

    for head in heads:
        if not calibration_in_model(head.calibration) and head.calibration.get("method") != "none":
            raise ValueError(
                f"head {head.name!r}: calibration {head.calibration.get('method')!r} cannot be folded into the "
                "graph; an N-endpoint bundle needs sigmoid (Platt) calibration"
            )
    trees, outputs = heads_to_onnx(heads, n_features)
    model = onnx.load_from_string(trees)
    graph = model.graph
    g = Ops("expected", (*outputs, *(f"{name}_column" for name in outputs), EXPECTED_OUTPUT), graph.initializer)
    bounds = " ".join(g.const(name, [value], np.int64) for name, value in (("start", 1), ("stop", 2), ("axis", 1)))
    for output in outputs:
        g.add("Slice", f"{output} {bounds}", f"{output}_column")
    g.add("Concat", " ".join(f"{name}_column" for name in outputs), EXPECTED_OUTPUT, axis=1)
    graph.node.extend(g.nodes)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(EXPECTED_OUTPUT, onnx.TensorProto.FLOAT, [None, len(heads)]))
    _default_opset_at_least(model, 13)  # Slice takes its bounds as inputs from opset 10
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _blend_nodes(head, output: str, margins: str):
    """(nodes, initializers) that turn the trees' `output` [n, 2] into the head's blend,
    [1 - q, q] with q = w * p + (1 - w) * sigmoid(m) (a mixture), or q = sigmoid(a * logit(p) +
    b * m + c) with p clipped to training.model.STACK_CLIP (a stack): p the trees' (calibrated)
    column 1, m the head's margin; float32 in and out, as the trees (a stack computes in
    float64 between). The trees' tensor is renamed."""
    import numpy as np
    from onnx import TensorProto

    index, trees = head.blend.outcome, f"{head.name}_trees"
    g = Ops(f"{head.name}_blend", (trees, margins, output))
    axis = g.const("axis", [1], np.int64)
    g.add("Slice", f"{trees} {g.const('p_start', [1], np.int64)} {g.const('p_stop', [2], np.int64)} {axis}", "p")
    m_start, m_stop = g.const("m_start", [index], np.int64), g.const("m_stop", [index + 1], np.int64)
    g.add("Slice", f"{margins} {m_start} {m_stop} {axis}", "m")
    if head.blend.stack is not None:  # q = sigmoid(a * logit(clip(p)) + b * m + c)
        from training.model import STACK_CLIP

        a, b, c = head.blend.stack
        low, high = STACK_CLIP
        # In float64, then one cast to float32: onnxruntime's float32 Log gives a value one ulp
        # apart depending on where it sits in the tensor (its vectorised body or the scalar tail),
        # so a prompt scored in a batch and alone would differ by 6e-8. A float64 ulp apart
        # almost never moves the float32 result, so route_batch keeps route()'s decisions.
        g.add("Cast", "p", "p64", to=TensorProto.DOUBLE)
        g.add("Cast", "m", "m64", to=TensorProto.DOUBLE)
        g.add("Clip", f"p64 {g.const('low', low, np.float64)} {g.const('high', high, np.float64)}", "clipped")
        g.add("Log", "clipped", "log_p")
        g.add("Sub", f"{g.const('unit', 1.0, np.float64)} clipped", "not_p")
        g.add("Log", "not_p", "log_not_p")
        g.add("Sub", "log_p log_not_p", "logit")
        g.add("Mul", f"logit {g.const('a', a, np.float64)}", "a_logit")
        g.add("Mul", f"m64 {g.const('b', b, np.float64)}", "b_m")
        g.add("Add", "a_logit b_m", "sum")
        g.add("Add", f"sum {g.const('c', c, np.float64)}", "z")
        g.add("Sigmoid", "z", "q64")
        g.add("Cast", "q64", "q", to=TensorProto.FLOAT)
    else:
        w = float(head.blend.tree_weight)
        g.add("Sigmoid", "m", "lexical")
        g.add("Mul", f"p {g.const('w', w, np.float32)}", "wp")
        g.add("Mul", f"lexical {g.const('one_minus_w', 1.0 - w, np.float32)}", "wl")
        g.add("Add", "wp wl", "q")
    g.add("Sub", f"{g.const('one', 1.0, np.float32)} q", "not_q")
    g.add("Concat", "not_q q", output, axis=1)
    return g.nodes, g.initializers


def _rename_input(graph, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]


def _for_onnx(booster):
    """The booster as the ONNX converter should see it: the same trees, each split threshold t
    replaced by the largest float32 value at or below it (the graph's float32 thresholds then
    split exactly where LightGBM does: docs/training.md#bundle-writing-guarantees, 3; categorical
    splits keep theirs), and a cross-entropy booster as the binary one it equals (same sigmoid
    link; the converter knows only the binary objective)."""
    import re

    import lightgbm as lgb
    import numpy as np

    def rounded_down(match: re.Match) -> str:
        exact = np.array(match.group(1).split(), dtype=np.float64)
        single = exact.astype(np.float32)
        single = np.where(single.astype(np.float64) > exact, np.nextafter(single, np.float32(-np.inf)), single)
        return "threshold=" + " ".join(repr(float(value)) for value in single)

    text = re.sub(r"^threshold=(.*)$", rounded_down, booster.model_to_string(), flags=re.MULTILINE)
    # `tree_sizes` gives each tree's length in characters, which the new thresholds change;
    # without it LightGBM reads the trees one after another.
    text = re.sub(r"^tree_sizes=.*\n", "", text, count=1, flags=re.MULTILINE)
    if "objective=cross_entropy" in text:
        text = text.replace("objective=cross_entropy", "objective=binary sigmoid:1")
        text = text.replace("[objective: cross_entropy]", "[objective: binary]")
    return lgb.Booster(model_str=text)


def booster_to_onnx(booster, n_features: int, calibration: dict, *, side: int | None = None) -> bytes:
    """TreeEnsembleClassifier graph with input `features` and output `probabilities` [n, 2].

    A shared head's booster (training.model.SIDE_FEATURE) reads one more column, its `side`:
    one `Pad` node appends it to `features`, so the SDK feeds every head the same input.

    With Platt calibration, column 1 is already the calibrated score: LightGBM's probability
    is sigmoid(raw), and Platt's sigmoid(a * logit(p) + b) is then sigmoid(a * raw + b), so
    scaling every leaf by `a` and adding `b` to each first-tree leaf calibrates inside the
    trees at no cost per call (an appended float64 tail cost ~10 us a call). See
    `calibration_in_model`. Other calibrations are applied by the SDK, from the manifest.
    """
    import onnx
    import onnxmltools
    from onnxmltools.convert.common.data_types import FloatTensorType

    from serving.scoring._calibration import calibrator

    calibrator(calibration)  # no bundle ships a calibration the SDK cannot apply
    width = n_features + (side is not None)
    model = onnxmltools.convert_lightgbm(
        _for_onnx(booster), initial_types=[("features", FloatTensorType([None, width]))], zipmap=False, target_opset=15
    )
    _drop_no_op_tail(model.graph)
    if side is not None:
        _append_side(model, side, n_features)
    # Only `probabilities` is served; the label branch would cost two nodes per call.
    model = onnx.utils.Extractor(model).extract_model(["features"], ["probabilities"])
    if calibration_in_model(calibration):
        _fold_platt(model.graph, a=float(calibration["a"]), b=float(calibration["b"]))
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _append_side(model, side: int, n_features: int) -> None:
    """`features` [n, n_features] padded with a last column of `side` before the trees."""
    import numpy as np
    import onnx
    from onnx import helper

    graph = model.graph
    _default_opset_at_least(model, 13)  # Pad takes its pads and value as inputs from opset 11
    _rename_input(graph, "features", "features_with_side")
    g = Ops("side", ("features", "features_with_side"), graph.initializer)
    pads, value = g.const("pads", [0, 0, 0, 1], np.int64), g.const("value", side, np.float32)
    g.add("Pad", f"features {pads} {value}", "features_with_side", mode="constant")
    graph.node.insert(0, g.nodes[0])
    graph.input[0].CopyFrom(helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, [None, n_features]))


def _default_opset_at_least(model, version: int) -> None:
    """The model's default-domain opset raised to `version` (the converter's trees use only ops
    unchanged since)."""
    from onnx import helper

    default = [entry for entry in model.opset_import if entry.domain in ("", "ai.onnx")]
    if default:
        default[0].version = max(default[0].version, version)
    else:
        model.opset_import.append(helper.make_opsetid("", version))


def calibration_in_model(calibration: dict) -> bool:
    """Whether booster_to_onnx folds this calibration into the trees (the manifest says so)."""
    return calibration.get("method") == "sigmoid"


def _fold_platt(graph, *, a: float, b: float) -> None:
    from onnx import helper

    (tree,) = [n for n in graph.node if n.op_type == "TreeEnsembleClassifier"]
    attributes = {x.name: helper.get_attribute_value(x) for x in tree.attribute}
    if (
        attributes.get("post_transform") != b"LOGISTIC"
        or "base_values" in attributes
        or set(attributes["class_ids"]) != {0}
    ):
        raise ValueError("cannot fold Platt calibration: expected one logistic score (LightGBM binary)")
    first_tree = min(attributes["class_treeids"])
    weights = [
        a * w + (b if t == first_tree else 0.0)
        for w, t in zip(attributes["class_weights"], attributes["class_treeids"])
    ]
    for x in tree.attribute:
        if x.name == "class_weights":
            del x.floats[:]
            x.floats.extend(weights)


def fuse(prefix: bytes, trees: bytes, *, trees_read: str = "features") -> bytes:
    """One graph from token ids and scalars to the heads' outputs (column 1: each head's
    calibrated probability when the trees carry the calibration): one onnxruntime call for
    any runtime. The trees read the prefix's output `trees_read` (`model_features` when the
    prefix appends lexical margins, training.lexical)."""
    import onnx
    from onnx import compose

    first, second = onnx.load_from_string(prefix), onnx.load_from_string(trees)
    # The converter stamps an older IR version than the prefix; both opsets are valid in the newer one.
    first.ir_version = second.ir_version = max(first.ir_version, second.ir_version)
    # Likewise its default-domain opset (it only uses ops unchanged since): align it with the prefix.
    default = {e.domain: e.version for e in first.opset_import}[""]
    for entry in second.opset_import:
        if entry.domain == "":
            entry.version = default
    first = compose.add_prefix(first, "embed_", rename_inputs=False, rename_outputs=False)
    # A blend's trees also read the prefix's lexical margins (MARGINS_OUTPUT).
    io_map = [(trees_read, "features")] + [(i.name, i.name) for i in second.graph.input if i.name != "features"]
    # `features` stays an output too: the SDK's familiarity measure reads the embedding part.
    merged = compose.merge_models(
        first, second, io_map=io_map, outputs=[o.name for o in second.graph.output] + ["features"]
    )
    onnx.checker.check_model(merged)
    return merged.SerializeToString()


def _drop_no_op_tail(graph) -> None:
    """The LightGBM converter ends in `Identity` and `Mul(x, 1.0)` before `probabilities`:
    no effect on the numbers, ~1.5 us of onnxruntime per node and call. The tree node's
    output takes their place."""
    from onnx import numpy_helper

    producers = {out: node for node in graph.node for out in node.output}
    mul = producers.get("probabilities")
    if mul is None or mul.op_type != "Mul":
        return
    source, factor = mul.input
    constant = next((numpy_helper.to_array(i) for i in graph.initializer if i.name == factor), None)
    if constant is None or constant.size != 1 or constant.item() != 1:
        return
    dropped = [mul]
    if producers[source].op_type == "Identity":
        dropped.append(producers[source])
        source = producers[source].input[0]
    tree = producers[source]
    tree.output[list(tree.output).index(source)] = "probabilities"
    for node in dropped:  # the factor's initializer goes with the extraction that follows
        graph.node.remove(node)
