"""The train/serve trace (`doctor --trace`): one sample through the draft as its trainer computed
it and as each engine computes it, compared stage by stage.

Two paths run the same forward (`model.tap` records its stages: the embedding rows, fc's output
or a block draft's context, per layer the attention input, the residual, the attention and MLP
outputs and the layer output, the final norm, the logits, the target ids). Each engine path is the
draft as that engine runs it: the flags it reads otherwise, the features it drops, the layers it
feeds (`doctor.wiring.engine_run`, `engine_reading`), the scale it gives a block's embedding rows,
the dtype it computes in. The report gives, per stage, the norm ratio (served over trained; a
cosine reads 1.0 across a 50x scale error, a norm ratio does not), the relative difference, and
the first stage where the paths part, with the cause named where one of the path's known
differences acts there: an embedding scale, a norm flag, a dtype, the vocabulary map, the shift
between tokens and features, the wiring, a dropped feature.

`paths` builds the paths, `run` runs one, `compare` diffs them; `finding` words the result.
"""
