package engine

import (
	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/gguf"
	"github.com/clawrl/clawrl/model"
)

// group names a devices group of config.yaml.
type group string

const (
	groupRollout group = "rollout"
	groupJudge   group = "judge"
	groupActor   group = "actor"
)

// Defaults is the configuration library callers without a config file
// get (Open and LoadModel with a nil config): the CPU, one thread per
// core, float32 products, the KV cache's dtype following the weights',
// the weights as stored, the scheduler's own defaults with the prefix
// cache on.
func Defaults() *config.Config {
	return &config.Config{
		Model:   config.Model{Precision: "f32", KVCacheDType: "auto", Quantize: "none"},
		Rollout: config.Rollout{PrefixCache: true},
	}
}

// hostBackend is the CPU backend, at the precision model.precision
// names: serving's unless it runs on GPUs, and the trainer's (GPU groups
// get theirs in openReplica).
func hostBackend(cfg *config.Config) *cpu.Backend {
	return cpu.NewWithOptions(cpu.Options{Precision: precision(cfg)})
}

// precision is the precision model.precision names (auto: BF16 products
// where the CPU multiplies BF16 in hardware).
func precision(cfg *config.Config) kernels.Precision {
	switch cfg.Model.Precision {
	case "bf16":
		return kernels.PrecisionBF16
	case "auto":
		if kernels.HasBF16Dot() {
			return kernels.PrecisionBF16
		}
	}
	return kernels.PrecisionF32
}

// BF16Precision reports whether model.precision has the products with
// BF16 weights round their activations to BF16.
func BF16Precision(cfg *config.Config) bool { return precision(cfg) == kernels.PrecisionBF16 }

// HasBF16Dot reports whether the CPU multiplies BF16 in hardware
// (AVX512_BF16).
func HasBF16Dot() bool { return kernels.HasBF16Dot() }

// KVDType is the KV cache storage model.kv_cache_dtype names for a model
// of config c (auto: BF16 for BF16 or F16 weights, F32 for float32 ones;
// q8_0: Q8_0 blocks, on the CPU backend only).
func KVDType(cfg *config.Config, c *model.Config) compute.DType { return kvDType(cfg, c) }

func kvDType(cfg *config.Config, c *model.Config) compute.DType {
	switch cfg.Model.KVCacheDType {
	case "bf16":
		return compute.BF16
	case "q8_0":
		return compute.Q8_0
	case "auto":
		if c.TorchDType == "bfloat16" || c.TorchDType == "float16" {
			return compute.BF16
		}
	}
	return compute.F32
}

// LoadModel loads the checkpoint in dir alone, with no tokenizer, cache,
// versions or scheduler, on the CPU (cfg nil: Defaults), quantized as
// model.quantize says: for benchmarks of the forward pass and for offline
// training (pretrain), which need a compute.Trainer (the CPU backend is
// one).
func LoadModel(cfg *config.Config, dir string) (*model.Model, error) {
	if cfg == nil {
		cfg = Defaults()
	}
	setServingThreads(cfg)
	return loadHost(cfg, dir)
}

// LoadModelNoting is LoadModel, also saying what model.quantize: auto
// converted as it loaded ("" for nothing), e.g. "Q4_K×112 → Q4_1, Q6_K×29
// → Q6_16".
func LoadModelNoting(cfg *config.Config, dir string) (*model.Model, string, error) {
	if cfg == nil {
		cfg = Defaults()
	}
	setServingThreads(cfg)
	return loadHostNoting(cfg, dir)
}

// loadHost loads the checkpoint at path on the CPU backend of cfg, its
// matrices quantized as model.quantize says (auto: see AutoRequantize).
func loadHost(cfg *config.Config, path string) (*model.Model, error) {
	m, _, err := loadHostNoting(cfg, path)
	return m, err
}

// loadHostNoting is loadHost, also saying what model.quantize: auto
// converted ("" for nothing), e.g. "Q4_K×112 → Q4_1, Q6_K×29 → Q6_16".
func loadHostNoting(cfg *config.Config, path string) (*model.Model, string, error) {
	b := hostBackend(cfg)
	if !AutoRequantize(cfg, path) {
		m, err := loadQuantized(b, path, QuantizeType(cfg), cfg)
		return m, "", err
	}
	src, err := gguf.OpenModel(path)
	if err != nil {
		return nil, "", err
	}
	rq, err := model.Requantize(sourceFor(cfg, src), compute.Q8_0)
	if err != nil {
		src.Close()
		return nil, "", err
	}
	m, err := model.LoadFrom(b, rq) // closes rq when it fails
	if err != nil {
		return nil, "", err
	}
	return m, rq.Note(), nil
}

// AutoRequantize reports whether model.quantize: auto converts the model
// at path as it loads (model.Requantize: Q4_K, Q5_K, Q5_0, IQ4_XS, Q6_K
// and Q3_K blocks rewritten as Q4_1, Q5_1, Q5_1, IQ4_NL, Q6_16 and Q6_16,
// Q2_K requantized to Q8_0): a GGUF file served
// on the CPU, whose matrices in block formats the CPU backend has no
// kernels for (as in the common Q4_K_M files) would otherwise be widened
// to float; not with GPUs (which take float weights) nor for
// full fine-tuning (trainer.lora_rank: 0), which trains float weights.
func AutoRequantize(cfg *config.Config, path string) bool {
	d := cfg.Devices
	return cfg.Model.Quantize == "auto" && IsGGUF(path) && cfg.Trainer.LoRARank > 0 &&
		len(d.Rollout.GPUs)+len(d.Actor.GPUs)+len(d.Judge.GPUs) == 0
}

// QuantizeType is the type model.quantize quantizes the checkpoint's
// matrices to on load (model.Quantize): compute.Q8_0, compute.Q4_0,
// compute.IQ4_NL, or 0 for none.
func QuantizeType(cfg *config.Config) compute.DType {
	switch cfg.Model.Quantize {
	case "q8_0":
		return compute.Q8_0
	case "q4_0":
		return compute.Q4_0
	case "iq4_nl":
		return compute.IQ4_NL
	}
	return 0
}

// setServingThreads sets the default pool's budget, serving's:
// model.threads or devices.rollout.threads (validation keeps them from
// disagreeing); 0 for both keeps one thread per core.
func setServingThreads(cfg *config.Config) {
	if t := max(cfg.Model.Threads, cfg.Devices.Rollout.Threads); t > 0 {
		kernels.SetThreads(t)
	}
}
