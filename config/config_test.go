package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func defaults(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := Load(Options{Defaults: defaults(t), Env: []string{}, File: writeFile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Host != "127.0.0.1" || c.Server.Port != 30000 {
		t.Errorf("server = %+v, want 127.0.0.1:30000", c.Server)
	}
	if c.Model.Path != "" || c.Model.KVCacheMB != 0 || c.Log.Level != "info" {
		t.Errorf("unexpected defaults: %+v", c)
	}
}

func TestLoad(t *testing.T) {
	flagSet := func(args ...string) *pflag.FlagSet {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.Int("port", 0, "")
		BindFlag(fs, "port", "server.port")
		fs.String("model", "", "")
		BindFlag(fs, "model", "model.path")
		fs.Bool("verbose", false, "not a config key")
		fs.String("server", "", "named like a config section, not bound")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	tests := []struct {
		name    string
		file    string
		env     []string
		flags   []string
		check   func(c *Config) bool
		wantErr string
	}{
		{name: "file overrides default", file: "server:\n  port: 31000\n",
			check: func(c *Config) bool { return c.Server.Port == 31000 && c.Server.Host == "127.0.0.1" }},
		{name: "env overrides file", file: "server:\n  port: 31000\n", env: []string{"CLAWRL_SERVER_PORT=32000"},
			check: func(c *Config) bool { return c.Server.Port == 32000 }},
		{name: "flag overrides env", env: []string{"CLAWRL_SERVER_PORT=32000"}, flags: []string{"--port=33000"},
			check: func(c *Config) bool { return c.Server.Port == 33000 }},
		{name: "unset flag leaves env", env: []string{"CLAWRL_MODEL_PATH=/m"}, flags: []string{"--verbose"},
			check: func(c *Config) bool { return c.Model.Path == "/m" }},
		{name: "flag named like a section is ignored", flags: []string{"--server=x"},
			check: func(c *Config) bool { return c.Server.Port == 30000 }},
		{name: "api keys alias, comma list", env: []string{"CLAWRL_API_KEYS=a, b"},
			check: func(c *Config) bool { return len(c.Server.APIKeys) == 2 && c.Server.APIKeys[1] == "b" }},
		{name: "api keys in file allow public host", file: "server:\n  host: 0.0.0.0\n  api_keys: [k1]\n",
			check: func(c *Config) bool { return c.Server.Host == "0.0.0.0" }},
		{name: "public host without key", file: "server:\n  host: 0.0.0.0\n", wantErr: "not a loopback address"},
		{name: "unknown file key", file: "server:\n  prot: 1\n", wantErr: "unknown key(s): server.prot"},
		{name: "unknown env", env: []string{"CLAWRL_SERVR_PORT=1"}, wantErr: "CLAWRL_SERVR_PORT"},
		{name: "bad port type", env: []string{"CLAWRL_SERVER_PORT=abc"}, wantErr: "port"},
		{name: "port range", file: "server:\n  port: 70000\n", wantErr: "server.port: 70000"},
		{name: "bad level", file: "log:\n  level: loud\n", wantErr: "log.level"},
		{name: "bad yaml", file: "server: [\n", wantErr: "c.yaml"},
		{name: "duration from env", env: []string{"CLAWRL_SESSIONS_IDLE_TIMEOUT=90s"},
			check: func(c *Config) bool { return c.Sessions.IdleTimeout.Seconds() == 90 }},
		{name: "bad duration", file: "server:\n  shutdown_timeout: soon\n", wantErr: "shutdown_timeout"},
		{name: "step tokens below batch", file: "rollout:\n  max_batch: 64\n  step_tokens: 32\n", wantErr: "rollout.step_tokens"},
		{name: "background kv share zero", file: "rollout:\n  background_kv: 0\n", wantErr: "rollout.background_kv"},
		{name: "background kv share above one", file: "rollout:\n  background_kv: 1.5\n", wantErr: "rollout.background_kv"},
		{name: "background rows below -1", file: "rollout:\n  background_rows: -2\n", wantErr: "background_rows"},
		{name: "background prefill zero", file: "rollout:\n  background_prefill: 0\n", wantErr: "background_prefill"},
		{name: "share under load above 0.9", file: "trainer:\n  share_under_load: 0.95\n", wantErr: "share_under_load"},
		{name: "share under load negative", file: "trainer:\n  share_under_load: -0.1\n", wantErr: "share_under_load"},
		{name: "ppo epochs zero", file: "trainer:\n  ppo_epochs: 0\n", wantErr: "ppo_epochs"},
		{name: "negative target kl", file: "trainer:\n  target_kl: -0.1\n", wantErr: "target_kl"},
		{name: "negative reward baseline window", file: "trainer:\n  reward_baseline_window: -1\n", wantErr: "reward_baseline_window"},
		{name: "bad thinking", env: []string{"CLAWRL_SERVER_ENABLE_THINKING=maybe"}, wantErr: "server.enable_thinking"},
		{name: "bool from env", env: []string{"CLAWRL_ROLLOUT_PREFIX_CACHE=false"},
			check: func(c *Config) bool { return !c.Rollout.PrefixCache }},
		{name: "precision from env", env: []string{"CLAWRL_MODEL_PRECISION=f32"},
			check: func(c *Config) bool { return c.Model.Precision == "f32" }},
		{name: "bad precision", file: "model:\n  precision: fp8\n", wantErr: "model.precision"},
		{name: "kv cache dtype default", check: func(c *Config) bool { return c.Model.KVCacheDType == "auto" }},
		{name: "kv cache dtype from env", env: []string{"CLAWRL_MODEL_KV_CACHE_DTYPE=bf16"},
			check: func(c *Config) bool { return c.Model.KVCacheDType == "bf16" }},
		{name: "bad kv cache dtype", file: "model:\n  kv_cache_dtype: fp8\n", wantErr: "model.kv_cache_dtype"},
		{name: "q8_0 kv cache", file: "model:\n  kv_cache_dtype: q8_0\n", check: func(c *Config) bool { return c.Model.KVCacheDType == "q8_0" }},
		{name: "q8_0 kv cache from env", env: []string{"CLAWRL_MODEL_KV_CACHE_DTYPE=q8_0"},
			check: func(c *Config) bool { return c.Model.KVCacheDType == "q8_0" }},
		{name: "q4_0 kv cache", file: "model:\n  kv_cache_dtype: q4_0\n", wantErr: `model.kv_cache_dtype: "q4_0" is not one of auto, bf16, f32, q8_0`},
		{name: "upper-case kv cache dtype", env: []string{"CLAWRL_MODEL_KV_CACHE_DTYPE=Q8_0"}, wantErr: "model.kv_cache_dtype"},
		{name: "q8_0 kv cache on GPUs", file: "model:\n  kv_cache_dtype: q8_0\ndevices:\n  rollout:\n    gpus: [0]\n", wantErr: "model.kv_cache_dtype: q8_0: a Q8_0 KV cache is built for the CPU backend only, not for GPUs (devices.rollout.gpus: [0])"},
		{name: "q8_0 kv cache on judge GPUs", file: "model:\n  kv_cache_dtype: q8_0\ndevices:\n  judge:\n    gpus: [1]\n", wantErr: "devices.judge.gpus: [1]"},
		{name: "quantize default", check: func(c *Config) bool { return c.Model.Quantize == "auto" }},
		{name: "quantize auto with GPUs", file: "model:\n  quantize: auto\ndevices:\n  rollout:\n    gpus: [0]\n", check: func(c *Config) bool { return c.Model.Quantize == "auto" }},
		{name: "quantize from env", env: []string{"CLAWRL_MODEL_QUANTIZE=q4_0"},
			check: func(c *Config) bool { return c.Model.Quantize == "q4_0" }},
		{name: "bad quantize", file: "model:\n  quantize: q5_k\n", wantErr: "model.quantize"},
		{name: "quantize iq4_nl", file: "model:\n  quantize: iq4_nl\n", check: func(c *Config) bool { return c.Model.Quantize == "iq4_nl" && c.Model.QuantizesOnLoad() }},
		{name: "full fine-tuning over iq4_nl", file: "model:\n  quantize: iq4_nl\ntrainer:\n  lora_rank: 0\n", wantErr: "over model.quantize: iq4_nl is not supported"},
		{name: "quantize on GPUs", file: "model:\n  quantize: q8_0\ndevices:\n  rollout:\n    gpus: [0]\n", wantErr: "CPU only"},
		{name: "full fine-tuning over a quantized base", file: "model:\n  quantize: q4_0\ntrainer:\n  lora_rank: 0\n", wantErr: "trainer.lora_rank: 0 (full fine-tuning) over model.quantize: q4_0"},
		{name: "full fine-tuning off over a quantized base", file: "model:\n  quantize: q4_0\ntrainer:\n  enabled: false\n  lora_rank: 0\n",
			check: func(c *Config) bool { return c.Model.Quantize == "q4_0" && c.Trainer.LoRARank == 0 }},
		{name: "negative kv cache", env: []string{"CLAWRL_MODEL_KV_CACHE_MB=-1"}, wantErr: "model.kv_cache_mb"},
		{name: "negative teacher cache", file: "reward:\n  teacher_kv_cache_mb: -5\n", wantErr: "reward.teacher_kv_cache_mb"},
		{name: "negative threads", env: []string{"CLAWRL_MODEL_THREADS=-2"}, wantErr: "model.threads"},
		{name: "method", file: "reward:\n  method: hinted\n  hinted_rollouts: 4\n",
			check: func(c *Config) bool { return c.Reward.Method == "hinted" && c.Reward.HintedRollouts == 4 }},
		{name: "bad method", file: "reward:\n  method: magic\n", wantErr: "reward.method"},
		{name: "too many rollouts", file: "reward:\n  hinted_rollouts: 99\n", wantErr: "reward.hinted_rollouts"},
		{name: "bad rollout temperature", file: "reward:\n  rollout_temperature: 3\n", wantErr: "reward.rollout_temperature"},
		{name: "guard", file: "trainer:\n  guard:\n    kl_max: 0\n    skill_probes: 0\n",
			check: func(c *Config) bool {
				return c.Trainer.Guard.KLMax == 0 && c.Trainer.Guard.SkillProbes == 0 && c.Trainer.Guard.LRFactor == 0.5
			}},
		{name: "replay", file: "trainer:\n  replay:\n    samples: 2\n    weight: 0.25\n    data: corpus\n",
			check: func(c *Config) bool {
				return c.Trainer.Replay == Replay{Samples: 2, Weight: 0.25, Data: "corpus"}
			}},
		{name: "bad replay samples", file: "trainer:\n  replay:\n    samples: -1\n", wantErr: "trainer.replay.samples"},
		{name: "too many replay samples", file: "trainer:\n  replay:\n    samples: 65\n", wantErr: "trainer.replay.samples"},
		{name: "bad replay weight", file: "trainer:\n  replay:\n    samples: 1\n    weight: 0\n", wantErr: "trainer.replay.weight"},
		{name: "bad guard", file: "trainer:\n  guard:\n    lr_factor: 2\n", wantErr: "trainer.guard"},
		{name: "bad guard recovery", file: "trainer:\n  guard:\n    recover_after: -1\n", wantErr: "trainer.guard"},
		{name: "bad guard margin", file: "trainer:\n  guard:\n    skill_margin: -1\n", wantErr: "trainer.guard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := Options{Defaults: defaults(t), Env: tt.env, File: writeFile(t, tt.file)}
			if opts.Env == nil {
				opts.Env = []string{}
			}
			if tt.flags != nil {
				opts.Flags = flagSet(tt.flags...)
			}
			c, err := Load(opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("config not as expected: %+v", c)
			}
		})
	}
}

func TestMissingFile(t *testing.T) {
	_, err := Load(Options{Defaults: defaults(t), Env: []string{}, File: "/nonexistent/c.yaml"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/c.yaml") {
		t.Fatalf("err = %v, want the path", err)
	}
}

func TestHostileValues(t *testing.T) {
	tests := []struct {
		file    string
		env     []string
		wantErr string // "" for none
		check   func(*Config) bool
	}{
		{file: "sessions:\n  idle_timeout: 5\n", wantErr: "idle_timeout"},
		{file: "sessions:\n  idle_timeout: \"5\"\n", wantErr: "has no unit"},
		{env: []string{"CLAWRL_SERVER_SHUTDOWN_TIMEOUT=30"}, wantErr: "has no unit"},
		{file: "sessions:\n  idle_timeout: 90s\n", check: func(c *Config) bool { return c.Sessions.IdleTimeout == 90*time.Second }},
		{file: "trainer:\n  max_wait: 0\n", check: func(c *Config) bool { return c.Trainer.MaxWait == 0 }},
		{file: "server:\n  host: \"[::1]\"\n", check: func(c *Config) bool { return c.Server.Host == "[::1]" }},
		{file: "server:\n  host: \"::1\"\n", check: func(c *Config) bool { return true }},
		{file: "server:\n  host: 0.0.0.0\n", wantErr: "not a loopback"},
		{file: "server:\n  model_aliases: [\"*\"]\n", check: func(c *Config) bool { return len(c.Server.ModelAliases) == 1 }},
		{file: "data:\n  max_mb: -1\n", wantErr: "data.max_mb"},
	}
	for _, tt := range tests {
		env := tt.env
		if env == nil {
			env = []string{}
		}
		c, err := Load(Options{Defaults: defaults(t), Env: env, File: writeFile(t, tt.file)})
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q %v: err = %v, want one saying %q", tt.file, tt.env, err, tt.wantErr)
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.file, err)
		case tt.check != nil && err == nil && !tt.check(c):
			t.Errorf("%q: got %+v", tt.file, c)
		}
	}
}

func TestDevices(t *testing.T) {
	tests := []struct {
		file    string
		wantErr []string
	}{
		{file: ""},
		{file: "devices:\n  actor:\n    gpus: [0, 1]\n  rollout:\n    gpus: [1]\n", wantErr: []string{"devices.actor.gpus: GPU 1 is also in devices.rollout.gpus"}},
		{file: "devices:\n  judge:\n    gpus: [2, 2]\n", wantErr: []string{"listed twice"}},
		{file: "devices:\n  judge:\n    gpus: [-1]\n", wantErr: []string{"not a GPU index"}},
		{file: "devices:\n  actor:\n    threads: 100000\n", wantErr: []string{"devices.actor.threads: 100000 is more than the", "more than the"}},
		{file: "devices:\n  actor:\n    threads: 1\n"},
		{file: "devices:\n  actor:\n    threads: -1\n", wantErr: []string{"must be >= 0"}},
	}
	for _, tt := range tests {
		_, err := Load(Options{Defaults: defaults(t), Env: []string{}, File: writeFile(t, tt.file)})
		if len(tt.wantErr) == 0 {
			if err != nil {
				t.Errorf("%q: %v", tt.file, err)
			}
			continue
		}
		for _, w := range tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: err = %v, want it to say %q", tt.file, err, w)
			}
		}
	}
	// Thread budgets against a fixed core count.
	for _, tt := range []struct {
		name                  string
		cores                 int
		model                 int
		rollout, judge, actor int
		wantErr               []string
	}{
		{name: "none", cores: 2},
		{name: "split of 8", cores: 8, rollout: 4, judge: 2, actor: 2},
		{name: "serving and training on 2", cores: 2, rollout: 1, actor: 1},
		{name: "one group", cores: 2, actor: 2},
		{name: "same count twice", cores: 4, model: 2, rollout: 2},
		{name: "over the cores", cores: 2, rollout: 1, judge: 1, actor: 1, wantErr: []string{"devices: 3 threads over the groups, more than the 2 cores", "sum to at most 2"}},
		{name: "one group too many", cores: 4, judge: 5, wantErr: []string{"devices.judge.threads: 5 is more than the 4 cores"}},
		{name: "negative", cores: 4, actor: -1, wantErr: []string{"devices.actor.threads: -1 must be >= 0"}},
		{name: "two counts for serving", cores: 4, model: 4, rollout: 2, wantErr: []string{"devices.rollout.threads: 2 and model.threads: 4 both set"}},
	} {
		var c Config
		c.Model.Threads = tt.model
		c.Devices.Rollout.Threads, c.Devices.Judge.Threads, c.Devices.Actor.Threads = tt.rollout, tt.judge, tt.actor
		errs := c.validateDevices(tt.cores)
		if len(tt.wantErr) == 0 && len(errs) > 0 {
			t.Errorf("%s: %v", tt.name, errs)
		}
		joined := fmt.Sprint(errs)
		for _, w := range tt.wantErr {
			if !strings.Contains(joined, w) {
				t.Errorf("%s: errors %v, want one saying %q", tt.name, errs, w)
			}
		}
	}
	for _, tt := range []struct {
		n                     int
		actor, rollout, judge []int
	}{
		{8, []int{0, 1, 2, 3}, []int{4, 5}, []int{6, 7}},
		{4, []int{0, 1}, []int{2}, []int{3}},
		{3, []int{0}, []int{1}, []int{2}},
		{2, []int{0}, []int{1}, []int{1}},
		{1, []int{0}, []int{0}, []int{0}},
		{0, nil, nil, nil},
	} {
		a, r, j := DefaultGPUSplit(tt.n)
		if !slices.Equal(a, tt.actor) || !slices.Equal(r, tt.rollout) || !slices.Equal(j, tt.judge) {
			t.Errorf("DefaultGPUSplit(%d) = %v %v %v", tt.n, a, r, j)
		}
	}
}
