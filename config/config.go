// Package config is the one place clawrl reads configuration from.
//
// Values come, highest precedence first, from command-line flags, CLAWRL_*
// environment variables, the user's YAML file, and the defaults embedded in
// the binary (the repository's config.yaml). Load returns a typed, validated
// Config; nothing else in the program calls viper or reads the environment
// for settings.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Config is the whole typed configuration.
type Config struct {
	Log      Log      `mapstructure:"log"`
	Model    Model    `mapstructure:"model"`
	Server   Server   `mapstructure:"server"`
	Rollout  Rollout  `mapstructure:"rollout"`
	Sessions Sessions `mapstructure:"sessions"`
	Trainer  Trainer  `mapstructure:"trainer"`
	Reward   Reward   `mapstructure:"reward"`
	Data     Data     `mapstructure:"data"`
	Devices  Devices  `mapstructure:"devices"`
}

// Trainer configures training from feedback.
type Trainer struct {
	Enabled                 bool          `mapstructure:"enabled"`
	BatchSize               int           `mapstructure:"batch_size"`
	MaxWait                 time.Duration `mapstructure:"max_wait"`
	FeedbackWait            time.Duration `mapstructure:"feedback_wait"`
	LR                      float64       `mapstructure:"lr"`
	WarmupSteps             int           `mapstructure:"warmup_steps"`
	WeightDecay             float64       `mapstructure:"weight_decay"`
	GradClip                float64       `mapstructure:"grad_clip"`
	ClipEpsLow              float64       `mapstructure:"clip_eps_low"`
	ClipEpsHigh             float64       `mapstructure:"clip_eps_high"`
	RLWeight                float64       `mapstructure:"rl_weight"`
	OPDWeight               float64       `mapstructure:"opd_weight"`
	BaselineWindow          int           `mapstructure:"reward_baseline_window"`
	KLCoef                  float64       `mapstructure:"kl_coef"`
	MaxStaleness            int           `mapstructure:"max_staleness"`
	PPOEpochs               int           `mapstructure:"ppo_epochs"`
	TargetKL                float64       `mapstructure:"target_kl"`
	YieldToServing          bool          `mapstructure:"yield_to_serving"`
	ShareUnderLoad          float64       `mapstructure:"share_under_load"`
	MicroBatchTokens        int           `mapstructure:"micro_batch_tokens"`
	LoRARank                int           `mapstructure:"lora_rank"`
	LoRAAlpha               float64       `mapstructure:"lora_alpha"`
	LoRATargets             []string      `mapstructure:"lora_targets"`
	ActivationCheckpointing bool          `mapstructure:"activation_checkpointing"`
	CheckpointDir           string        `mapstructure:"checkpoint_dir"`
	CheckpointEvery         int           `mapstructure:"checkpoint_every"`
	CheckpointShare         float64       `mapstructure:"checkpoint_max_share"`
	KeepCheckpoints         int           `mapstructure:"keep_checkpoints"`
	Guard                   Guard         `mapstructure:"guard"`
	Replay                  Replay        `mapstructure:"replay"`
}

// Replay configures the examples replayed beside users' turns in every
// training step (trainer.replay; package replay).
type Replay struct {
	Samples int     `mapstructure:"samples"`
	Weight  float64 `mapstructure:"weight"`
	Data    string  `mapstructure:"data"`
}

// Guard configures automatic rollback (trainer.guard).
type Guard struct {
	KLMax       float64 `mapstructure:"kl_max"`
	SkillProbes int     `mapstructure:"skill_probes"`
	SkillMargin float64 `mapstructure:"skill_margin"`
	SkillEvery  int     `mapstructure:"skill_every"`
	LRFactor    float64 `mapstructure:"lr_factor"`
	// RecoverAfter: good checks in a row after which a lowered learning
	// rate rises by one trip's factor (0: never).
	RecoverAfter int `mapstructure:"recover_after"`
}

// Reward configures the judge and the teacher.
type Reward struct {
	Judge            string        `mapstructure:"judge"`
	JudgeBaseURL     string        `mapstructure:"judge_base_url"`
	JudgeAPIKey      string        `mapstructure:"judge_api_key"`
	JudgeModel       string        `mapstructure:"judge_model"`
	Teacher          string        `mapstructure:"teacher"`
	Method           string        `mapstructure:"method"`
	HintedRollouts   int           `mapstructure:"hinted_rollouts"`
	RolloutTemp      float64       `mapstructure:"rollout_temperature"`
	RolloutMaxTokens int           `mapstructure:"rollout_max_tokens"`
	Votes            int           `mapstructure:"votes"`
	Temperature      float64       `mapstructure:"temperature"`
	MaxTokens        int           `mapstructure:"max_tokens"`
	HintVotes        int           `mapstructure:"hint_votes"`
	HintRule         string        `mapstructure:"hint_rule"`
	HintGrounding    bool          `mapstructure:"hint_grounding"`
	Timeout          time.Duration `mapstructure:"timeout"`
	Workers          int           `mapstructure:"workers"`
	TeacherKVCacheMB int           `mapstructure:"teacher_kv_cache_mb"`
}

// Devices is the devices section: which devices each stage's worker pool
// runs on. Serving (rollout) answers users, the judge scores turns, the
// actor trains.
type Devices struct {
	Rollout DeviceGroup `mapstructure:"rollout"`
	Judge   DeviceGroup `mapstructure:"judge"`
	Actor   DeviceGroup `mapstructure:"actor"`
}

// DeviceGroup is one stage's devices: GPU indices on a GPU box, a thread
// budget on the CPU.
type DeviceGroup struct {
	GPUs    []int `mapstructure:"gpus"`
	Threads int   `mapstructure:"threads"`
}

// DefaultGPUSplit splits n GPUs between the actor, rollout and judge
// groups in the proportions 4:2:2 (8 GPUs: 0-3 actor, 4-5 rollout, 6-7
// judge), each group getting at least one GPU when n >= 3; with fewer,
// the groups share GPU 0 (and 1).
func DefaultGPUSplit(n int) (actor, rollout, judge []int) {
	seq := func(from, to int) []int {
		var out []int
		for i := from; i < to; i++ {
			out = append(out, i)
		}
		return out
	}
	switch {
	case n <= 0:
		return nil, nil, nil
	case n == 1:
		return []int{0}, []int{0}, []int{0}
	case n == 2:
		return []int{0}, []int{1}, []int{1}
	}
	j := max(1, n/4)
	r := max(1, n/4)
	a := n - j - r
	return seq(0, a), seq(a, a+r), seq(a+r, n)
}

// validateDevices checks the devices section: no GPU in two groups, no
// negative index or thread count, no more threads than cores, and
// model.threads and devices.rollout.threads not set to two different
// counts. Whether the GPUs are there is the engine's to find out, at
// start.
func (c *Config) validateDevices(cores int) []error {
	var errs []error
	groups := []struct {
		name string
		g    DeviceGroup
	}{{"rollout", c.Devices.Rollout}, {"judge", c.Devices.Judge}, {"actor", c.Devices.Actor}}
	owner := map[int]string{}
	threads := 0
	for _, gr := range groups {
		key := "devices." + gr.name
		for _, id := range gr.g.GPUs {
			switch prev, taken := owner[id]; {
			case id < 0:
				errs = append(errs, fmt.Errorf("%s.gpus: %d is not a GPU index (0, 1, ...)", key, id))
			case taken && prev != gr.name:
				errs = append(errs, fmt.Errorf("%s.gpus: GPU %d is also in devices.%s.gpus; a GPU belongs to one group", key, id, prev))
			case taken:
				errs = append(errs, fmt.Errorf("%s.gpus: GPU %d is listed twice", key, id))
			default:
				owner[id] = gr.name
			}
		}
		switch t := gr.g.Threads; {
		case t < 0:
			errs = append(errs, fmt.Errorf("%s.threads: %d must be >= 0 (0 = share the cores, serving first)", key, t))
		case t > cores:
			errs = append(errs, fmt.Errorf("%s.threads: %d is more than the %d cores of this machine", key, t, cores))
		}
		threads += max(0, gr.g.Threads)
	}
	if threads > cores {
		errs = append(errs, fmt.Errorf("devices: %d threads over the groups, more than the %d cores of this machine; "+
			"lower devices.*.threads so that they sum to at most %d", threads, cores, cores))
	}
	if r := c.Devices.Rollout.Threads; r > 0 && c.Model.Threads > 0 && r != c.Model.Threads {
		errs = append(errs, fmt.Errorf("devices.rollout.threads: %d and model.threads: %d both set serving's threads; "+
			"set one of them (or both to the same count)", r, c.Model.Threads))
	}
	return errs
}

// Data is the data section: where turns, feedback, samples and
// checkpoints are kept, and for how long.
type Data struct {
	Dir           string `mapstructure:"dir"`
	MaxMB         int    `mapstructure:"max_mb"`
	RetentionDays int    `mapstructure:"retention_days"`
	Redact        bool   `mapstructure:"redact"`
	// HashIDs stores the session ids clients give (X-Session-Id, user,
	// prompt_cache_key) as keyed hashes.
	HashIDs bool `mapstructure:"hash_ids"`
}

// DataDir is data.dir, or the per-user default: $XDG_DATA_HOME/clawrl,
// else ~/.local/share/clawrl.
func (c *Config) DataDir() (string, error) {
	if c.Data.Dir != "" {
		return c.Data.Dir, nil
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "clawrl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("data.dir: no home directory to put the data in; set data.dir (or CLAWRL_DATA_DIR)")
	}
	return filepath.Join(home, ".local", "share", "clawrl"), nil
}

// CheckpointDir is trainer.checkpoint_dir, or checkpoints/ under the data
// directory.
func (c *Config) CheckpointDir() (string, error) {
	if c.Trainer.CheckpointDir != "" {
		return c.Trainer.CheckpointDir, nil
	}
	d, err := c.DataDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "checkpoints"), nil
}

// Log configures logging.
type Log struct {
	Level  string `mapstructure:"level"`
	Format string `mapstructure:"format"`
}

// QuantizesOnLoad reports whether model.quantize names a block type the
// matrices are quantized to as they load (q8_0, q4_0, iq4_nl), rather
// than none or auto.
func (m Model) QuantizesOnLoad() bool {
	return m.Quantize == "q8_0" || m.Quantize == "q4_0" || m.Quantize == "iq4_nl"
}

// Model says which checkpoint to serve and how to run it.
type Model struct {
	Path      string `mapstructure:"path"`
	Threads   int    `mapstructure:"threads"`
	KVCacheMB int    `mapstructure:"kv_cache_mb"`
	// Precision of the products with BF16 weights: auto, bf16 or f32 (see
	// config.yaml).
	Precision string `mapstructure:"precision"`
	// KVCacheDType is the key/value cache's storage: auto, bf16, f32 or
	// q8_0 (see config.yaml).
	KVCacheDType string `mapstructure:"kv_cache_dtype"`
	// Quantize quantizes the checkpoint's matrices as they are loaded:
	// auto, none, q8_0, q4_0 or iq4_nl (see config.yaml).
	Quantize string `mapstructure:"quantize"`
	// ChatTemplate replaces the model's chat template: a Jinja template
	// file, or the template itself (see config.yaml).
	ChatTemplate string `mapstructure:"chat_template"`
	// LongContext runs a LongRoPE model (Phi-3 128k, Phi-3.5) over its
	// whole context with its long factors (see config.yaml).
	LongContext bool `mapstructure:"long_context"`
}

// Server configures the OpenAI-compatible API.
type Server struct {
	Host             string        `mapstructure:"host"`
	Port             int           `mapstructure:"port"`
	APIKeys          []string      `mapstructure:"api_keys"`
	ModelAliases     []string      `mapstructure:"model_aliases"`
	AdminKeys        []string      `mapstructure:"admin_keys"`
	MaxBodyMB        int           `mapstructure:"max_body_mb"`
	MaxN             int           `mapstructure:"max_n"`
	DefaultMaxTokens int           `mapstructure:"default_max_tokens"`
	EnableThinking   string        `mapstructure:"enable_thinking"`
	ShutdownTimeout  time.Duration `mapstructure:"shutdown_timeout"`
	// Dashboard serves the web dashboard at /dashboard.
	Dashboard bool `mapstructure:"dashboard"`
}

// Rollout configures the generation scheduler.
type Rollout struct {
	MaxBatch    int  `mapstructure:"max_batch"`
	QueueSize   int  `mapstructure:"queue_size"`
	StepTokens  int  `mapstructure:"step_tokens"`
	PrefixCache bool `mapstructure:"prefix_cache"`
	// BackgroundKV is the share of the KV cache judge and teacher
	// generations may hold together.
	BackgroundKV float64 `mapstructure:"background_kv"`
	// BackgroundPrefill is the most prompt tokens of judge and teacher
	// requests one scheduler step computes while a user's request runs
	// (-1: no limit beyond step_tokens).
	BackgroundPrefill int `mapstructure:"background_prefill"`
	// BackgroundRows is the most judge and teacher sequences one step
	// decodes while a user's request runs (-1: no limit).
	BackgroundRows int `mapstructure:"background_rows"`
}

// Sessions bounds the memory of session tracking.
type Sessions struct {
	MaxSessions int           `mapstructure:"max_sessions"`
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	MaxTurns    int           `mapstructure:"max_turns"`
}

// Options says where Load looks besides the embedded defaults.
type Options struct {
	// Defaults is the embedded config.yaml.
	Defaults []byte
	// File is a user config file; empty means ./config.yaml if it exists.
	File string
	// Flags, if set, override everything else. A flag is bound to the key
	// named by its annotation "config" (see BindFlag), or else to its name.
	Flags *pflag.FlagSet
	// Env replaces os.Environ (for tests); nil means the process environment.
	Env []string
}

// FlagAnnotation is the pflag annotation that names the config key a flag sets.
const FlagAnnotation = "config"

// BindFlag marks flag name on fs as setting config key (e.g. "server.port").
func BindFlag(fs *pflag.FlagSet, name, key string) {
	if err := fs.SetAnnotation(name, FlagAnnotation, []string{key}); err != nil {
		panic(fmt.Sprintf("config: binding flag %q: %v", name, err)) // programming error
	}
}

// Load merges defaults, file, environment and flags, and validates the result.
func Load(opts Options) (*Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(opts.Defaults)); err != nil {
		return nil, fmt.Errorf("config: embedded defaults: %w", err)
	}
	file := opts.File
	if file == "" {
		if _, err := os.Stat("config.yaml"); err == nil {
			file = "config.yaml"
		}
	}
	if file != "" {
		f, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		user := viper.New()
		user.SetConfigType("yaml")
		if err := user.ReadConfig(bytes.NewReader(f)); err != nil {
			return nil, fmt.Errorf("config: %s: %w", file, err)
		}
		if err := checkKnownKeys(v, user.AllKeys(), file); err != nil {
			return nil, err
		}
		if err := v.MergeConfigMap(user.AllSettings()); err != nil {
			return nil, fmt.Errorf("config: %s: %w", file, err)
		}
	}
	if err := applyEnv(v, opts.Env); err != nil {
		return nil, err
	}
	if opts.Flags != nil {
		// Only flags the user gave (Visit skips defaults), set last so that
		// they win over the environment.
		leaves := map[string]bool{}
		for _, k := range v.AllKeys() {
			leaves[k] = true
		}
		opts.Flags.Visit(func(f *pflag.Flag) {
			key := f.Name
			if a := f.Annotations[FlagAnnotation]; len(a) == 1 {
				key = a[0]
			}
			if !leaves[key] {
				return // a flag that is not a config key
			}
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				v.Set(key, sv.GetSlice())
				return
			}
			v.Set(key, f.Value.String())
		})
	}
	var c Config
	decode := func(dc *mapstructure.DecoderConfig) {
		dc.ErrorUnused = true
		dc.WeaklyTypedInput = true
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			refuseBareDurations,
			mapstructure.StringToSliceHookFunc(","),
			mapstructure.StringToTimeDurationHookFunc(),
		)
	}
	if err := v.Unmarshal(&c, decode); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// refuseBareDurations refuses a number where a duration goes
// (idle_timeout: 5 would otherwise be 5 nanoseconds) and a string without
// a unit ("5").
func refuseBareDurations(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("%v has no unit: write it as a duration such as %vs, %vm or %vh", data, data, data, data)
	case reflect.String:
		if s := strings.TrimSpace(data.(string)); s != "" && s != "0" && strings.Trim(s, "0123456789.") == "" {
			return nil, fmt.Errorf("%q has no unit: write it as a duration such as %ss, %sm or %sh", s, s, s, s)
		}
	}
	return data, nil
}

// checkKnownKeys refuses keys the defaults do not have: a typo in a config
// file should be an error, not a silently ignored setting.
func checkKnownKeys(defaults *viper.Viper, keys []string, file string) error {
	known := map[string]bool{}
	for _, k := range defaults.AllKeys() {
		known[k] = true
	}
	var unknown []string
	for _, k := range keys {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("config: %s: unknown key(s): %s", file, strings.Join(unknown, ", "))
	}
	return nil
}

// envAliases are accepted environment names that do not follow the
// CLAWRL_<SECTION>_<KEY> pattern.
var envAliases = map[string]string{
	"CLAWRL_API_KEYS":   "server.api_keys",
	"CLAWRL_ADMIN_KEYS": "server.admin_keys",
}

// applyEnv sets every known key from CLAWRL_<SECTION>_<KEY> (dots become
// underscores, upper case). Unknown CLAWRL_* variables are reported, since
// they are almost always typos.
func applyEnv(v *viper.Viper, env []string) error {
	if env == nil {
		env = os.Environ()
	}
	byEnv := map[string]string{}
	for _, k := range v.AllKeys() {
		byEnv["CLAWRL_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = k
	}
	for name, key := range envAliases {
		byEnv[name] = key
	}
	var unknown []string
	for _, kv := range env {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "CLAWRL_") {
			continue
		}
		key, ok := byEnv[name]
		if !ok {
			if !notConfig[name] {
				unknown = append(unknown, name)
			}
			continue
		}
		v.Set(key, val)
	}
	if len(unknown) > 0 {
		return fmt.Errorf("config: unknown environment variable(s): %s", strings.Join(unknown, ", "))
	}
	return nil
}

// notConfig lists CLAWRL_* variables that other parts of the program read
// (tests, kernels) and that are not configuration keys.
var notConfig = map[string]bool{
	"CLAWRL_KERNELS":              true,
	"CLAWRL_QWEN3_TOKENIZER_DIR":  true,
	"CLAWRL_TEST_LONG":            true,
	"CLAWRL_BENCH_MODEL":          true,
	"CLAWRL_BENCH_CHECKPOINT_DIR": true,
	"CLAWRL_LIBCUDA":              true, // the CUDA driver library to load (package cuda)
	"CLAWRL_FAKECUDA_DEVICES":     true, // the fake driver's device count (tests)
	"CLAWRL_FAKECUDA_CFLAGS":      true,
	"CLAWRL_FAKECUDA_REQUIRED":    true,
	"CLAWRL_CUDA_TEST_DRIVER":     true,
}

// Validate checks ranges and combinations, with messages that name the key.
func (c *Config) Validate() error {
	var errs []error
	oneOf := func(key, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			errs = append(errs, fmt.Errorf("%s: %q is not one of %s", key, v, strings.Join(allowed, ", ")))
		}
	}
	oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	oneOf("log.format", c.Log.Format, "auto", "console", "json")
	if c.Model.Threads < 0 {
		errs = append(errs, fmt.Errorf("model.threads: %d must be >= 0 (0 = one per core)", c.Model.Threads))
	}
	if c.Model.KVCacheMB < 0 {
		errs = append(errs, fmt.Errorf("model.kv_cache_mb: %d must be >= 0 (0 = sized from the model)", c.Model.KVCacheMB))
	}
	oneOf("model.precision", c.Model.Precision, "auto", "bf16", "f32")
	oneOf("model.kv_cache_dtype", c.Model.KVCacheDType, "auto", "bf16", "f32", "q8_0")
	if c.Model.KVCacheDType == "q8_0" {
		for _, g := range []struct {
			key  string
			gpus []int
		}{{"devices.rollout.gpus", c.Devices.Rollout.GPUs}, {"devices.judge.gpus", c.Devices.Judge.GPUs}, {"devices.actor.gpus", c.Devices.Actor.GPUs}} {
			if len(g.gpus) > 0 {
				errs = append(errs, fmt.Errorf("model.kv_cache_dtype: q8_0: a Q8_0 KV cache is built for the CPU backend only, not for GPUs (%s: %v); set model.kv_cache_dtype: bf16 (or auto)", g.key, g.gpus))
			}
		}
	}
	oneOf("model.quantize", c.Model.Quantize, "auto", "none", "q8_0", "q4_0", "iq4_nl")
	if c.Model.QuantizesOnLoad() && len(c.Devices.Rollout.GPUs) > 0 {
		errs = append(errs, fmt.Errorf("model.quantize: %s: quantized weights run on the CPU only; serving on GPUs (devices.rollout.gpus) takes the checkpoint's weights (set model.quantize: none)", c.Model.Quantize))
	}
	if c.Server.Port < 1 || c.Server.Port > 65535 {
		errs = append(errs, fmt.Errorf("server.port: %d is not a TCP port (1-65535)", c.Server.Port))
	}
	if c.Server.Host == "" {
		errs = append(errs, errors.New("server.host: must not be empty"))
	}
	positive := func(key string, v int) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s: %d must be >= 1", key, v))
		}
	}
	positive("server.max_body_mb", c.Server.MaxBodyMB)
	positive("server.max_n", c.Server.MaxN)
	positive("server.default_max_tokens", c.Server.DefaultMaxTokens)
	positive("rollout.max_batch", c.Rollout.MaxBatch)
	positive("rollout.queue_size", c.Rollout.QueueSize)
	positive("rollout.step_tokens", c.Rollout.StepTokens)
	positive("sessions.max_sessions", c.Sessions.MaxSessions)
	positive("sessions.max_turns", c.Sessions.MaxTurns)
	errs = append(errs, c.validateDevices(runtime.NumCPU())...)
	if c.Data.MaxMB < 0 {
		errs = append(errs, fmt.Errorf("data.max_mb: %d must be >= 0 (0 = no budget)", c.Data.MaxMB))
	}
	if c.Data.RetentionDays < 0 {
		errs = append(errs, fmt.Errorf("data.retention_days: %d must be >= 0 (0 = keep forever)", c.Data.RetentionDays))
	}
	if s := c.Trainer.ShareUnderLoad; !(s >= 0 && s <= 0.9) {
		errs = append(errs, fmt.Errorf("trainer.share_under_load: %v must lie in [0, 0.9]: the share of the machine training may take while serving is busy (0: only when serving is idle)", s))
	}
	if c.Trainer.PPOEpochs < 1 || c.Trainer.PPOEpochs > 16 {
		errs = append(errs, fmt.Errorf("trainer.ppo_epochs: %d must lie in [1, 16]: optimizer updates per batch", c.Trainer.PPOEpochs))
	}
	if w := c.Trainer.BaselineWindow; w < 0 {
		errs = append(errs, fmt.Errorf("trainer.reward_baseline_window: %d must be ≥ 0 (0 turns the baseline off): the rewards the running mean subtracted from each reward spans", w))
	}
	if k := c.Trainer.TargetKL; !(k >= 0) || math.IsInf(k, 0) {
		errs = append(errs, fmt.Errorf("trainer.target_kl: %v must be ≥ 0 (0 turns the trust region off): the largest KL per token from a step's start to its result", k))
	}
	if r := c.Rollout.BackgroundRows; r == 0 || r < -1 {
		errs = append(errs, fmt.Errorf("rollout.background_rows: %d must be -1 (no limit) or at least 1: background sequences decoded per step while users run", r))
	}
	if p := c.Rollout.BackgroundPrefill; p == 0 || p < -1 {
		errs = append(errs, fmt.Errorf("rollout.background_prefill: %d must be -1 (no limit) or at least 1: prompt tokens of background requests per step while users run", p))
	}
	if !(c.Rollout.BackgroundKV > 0 && c.Rollout.BackgroundKV <= 1) {
		errs = append(errs, fmt.Errorf("rollout.background_kv: %v must lie in (0, 1]: the share of the KV cache background work may hold", c.Rollout.BackgroundKV))
	}
	if c.Rollout.StepTokens < c.Rollout.MaxBatch {
		errs = append(errs, fmt.Errorf("rollout.step_tokens: %d must be >= rollout.max_batch (%d): every running sequence decodes one token per step",
			c.Rollout.StepTokens, c.Rollout.MaxBatch))
	}
	oneOf("server.enable_thinking", c.Server.EnableThinking, "auto", "true", "false")
	if c.Server.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("server.shutdown_timeout: %v must not be negative", c.Server.ShutdownTimeout))
	}
	if c.Sessions.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("sessions.idle_timeout: %v must be positive", c.Sessions.IdleTimeout))
	}
	positive("trainer.batch_size", c.Trainer.BatchSize)
	positive("trainer.micro_batch_tokens", c.Trainer.MicroBatchTokens)
	positive("reward.votes", c.Reward.Votes)
	positive("reward.max_tokens", c.Reward.MaxTokens)
	positive("reward.workers", c.Reward.Workers)
	if c.Reward.TeacherKVCacheMB < 0 {
		errs = append(errs, fmt.Errorf("reward.teacher_kv_cache_mb: %d must be >= 0 (0 = sized from the model)", c.Reward.TeacherKVCacheMB))
	}
	if g := c.Trainer.Guard; g.KLMax < 0 || math.IsNaN(g.KLMax) || g.SkillProbes < 0 || g.SkillMargin < 0 || g.SkillMargin > 1 ||
		g.SkillEvery < 1 || g.LRFactor <= 0 || g.LRFactor > 1 || g.RecoverAfter < 0 {
		errs = append(errs, fmt.Errorf("trainer.guard: kl_max >= 0, skill_probes >= 0, skill_margin in [0, 1], skill_every >= 1, lr_factor in (0, 1] and recover_after >= 0 are required (got %+v)", g))
	}
	if r := c.Trainer.Replay; r.Samples < 0 || r.Samples > 64 {
		errs = append(errs, fmt.Errorf("trainer.replay.samples: %d must lie in [0, 64] (0 = no replay)", r.Samples))
	} else if r.Samples > 0 && (!(r.Weight > 0) || math.IsInf(r.Weight, 0)) {
		errs = append(errs, fmt.Errorf("trainer.replay.weight: %v must be positive and finite", r.Weight))
	}
	if c.Trainer.MaxWait < 0 {
		errs = append(errs, fmt.Errorf("trainer.max_wait: %v must not be negative", c.Trainer.MaxWait))
	}
	if s := c.Trainer.CheckpointShare; s < 0 || s > 1 || math.IsNaN(s) {
		errs = append(errs, fmt.Errorf("trainer.checkpoint_max_share: %v must be in [0, 1] (0: no bound)", s))
	}
	if c.Trainer.FeedbackWait < 0 {
		errs = append(errs, fmt.Errorf("trainer.feedback_wait: %v must not be negative", c.Trainer.FeedbackWait))
	}
	if c.Trainer.LoRARank < 0 {
		errs = append(errs, fmt.Errorf("trainer.lora_rank: %d must be >= 0 (0 = full fine-tuning)", c.Trainer.LoRARank))
	}
	if c.Trainer.Enabled && c.Trainer.LoRARank == 0 && c.Model.QuantizesOnLoad() {
		errs = append(errs, fmt.Errorf("trainer.lora_rank: 0 (full fine-tuning) over model.quantize: %s is not supported: set trainer.lora_rank > 0 to train LoRA adapters over the quantized base, or model.quantize: none", c.Model.Quantize))
	}
	if c.Reward.HintVotes < 0 {
		errs = append(errs, fmt.Errorf("reward.hint_votes: %d must be >= 0", c.Reward.HintVotes))
	}
	oneOf("reward.judge", c.Reward.Judge, "local", "openai")
	if c.Reward.Judge == "openai" && (c.Reward.JudgeBaseURL == "" || c.Reward.JudgeModel == "") {
		errs = append(errs, errors.New("reward.judge: openai needs reward.judge_base_url and reward.judge_model"))
	}
	oneOf("reward.teacher", c.Reward.Teacher, "policy", "reference", "judge", "none")
	oneOf("reward.hint_rule", c.Reward.HintRule, "longest", "shortest", "agree")
	oneOf("reward.method", c.Reward.Method, "binary", "distill", "hinted", "combined", "paper")
	if c.Reward.HintedRollouts < 0 || c.Reward.HintedRollouts > 16 {
		errs = append(errs, fmt.Errorf("reward.hinted_rollouts: %d must lie in [0, 16]", c.Reward.HintedRollouts))
	}
	if c.Reward.RolloutTemp < 0 || c.Reward.RolloutTemp > 2 || math.IsNaN(c.Reward.RolloutTemp) {
		errs = append(errs, fmt.Errorf("reward.rollout_temperature: %v must lie in [0, 2]", c.Reward.RolloutTemp))
	}
	if c.Reward.RolloutMaxTokens < 1 {
		errs = append(errs, fmt.Errorf("reward.rollout_max_tokens: %d must be >= 1", c.Reward.RolloutMaxTokens))
	}
	keys := c.Server.APIKeys[:0:0]
	for _, k := range c.Server.APIKeys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	c.Server.APIKeys = keys
	if len(keys) == 0 && c.Server.Host != "" && !IsLoopback(c.Server.Host) {
		errs = append(errs, fmt.Errorf("server.host: %q is not a loopback address and no server.api_keys are set; set a key (CLAWRL_API_KEYS) or listen on 127.0.0.1", c.Server.Host))
	}
	if len(errs) > 0 {
		return fmt.Errorf("config: %w", errors.Join(errs...))
	}
	return nil
}

// IsLoopback reports whether host names only the local machine.
func IsLoopback(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]") // [::1]
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
