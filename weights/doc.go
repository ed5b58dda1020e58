// Package weights owns the versions of the served model's parameters and
// their checkpoints on disk.
//
// # Versions
//
// A Version is one immutable parameter set (a *model.Weights) with its
// number, its parent's number, when it was made and what training made it.
// A Store holds the current version behind an atomic pointer: the trainer
// Publishes a new version, rollout Acquires the current one for a request
// (or a decode step) and Releases it when done. A reader holds exactly one
// version for as long as it likes, so it never sees a mix of two; a
// version that is neither current, nor kept for rollback, nor held by a
// reader is freed at once (Weights.Free).
//
// Version numbers only grow. Rollback does not make an old number current
// again: it publishes a new version (the next number) that shares the old
// version's weights and names it as parent, so "the current version
// number" is monotone and staleness (current − generating version) never
// goes negative.
//
// # Checkpoints
//
// A checkpoint is a directory in Hugging Face layout, so model.Load and
// other tools read it as a model:
//
//	<root>/v00000012/
//	    config.json
//	    model.safetensors          the version's weights, in the base dtype
//	    trainer_state.safetensors  optimizer and trainer tensors (Adam moments,
//	                               master weights or LoRA adapters)
//	    trainer_state.json         the trainer's scalars (step, RNG, options)
//	    manifest.json              version metadata; size and SHA-256 per file
//
// A checkpoint of LoRA adapters only (Manifest.Adapters) has no
// model.safetensors: its manifest names the base model the adapters apply
// to, as a PEFT adapter directory does, and a loader (package engine)
// loads that base and applies them.
//
// Save writes every file into a temporary directory beside the others,
// fsyncs each file and the directory, renames the directory into place and
// fsyncs the root, so a checkpoint directory that exists is complete; then
// it deletes all but the newest Keep checkpoints. Open refuses a damaged
// checkpoint (a missing or truncated file, a checksum mismatch, a bad
// safetensors header, a tensor whose shape does not match config.json) with
// an error naming the path and the reason; OpenLatest falls back to the
// newest checkpoint that passes.
//
// This package moves bytes and bookkeeping; it never does arithmetic on
// tensors (that is the trainer's job).
package weights
