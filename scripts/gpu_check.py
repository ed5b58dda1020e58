#!/usr/bin/env python3
"""The Python parts of scripts/gpu-check: a reference for clawrl's CUDA path.

Subcommands (run by scripts/gpu-check; each can be run alone):

  write-model  a random Qwen3 checkpoint written by transformers (torch)
  prompt       deterministic prompt token ids for a checkpoint (stdlib)
  compare      clawrl's logits and greedy tokens (`clawrl bench logits`)
               against transformers in float32 and bfloat16 (torch)
  export-check transformers loads a `clawrl export` and computes clawrl's
               logits for it (torch)
  compare-dumps  two clawrl dumps against each other (stdlib; the dry run
               compares the emulated GPU with the CPU)
  torch-bench  torch.matmul (cuBLAS) on the shapes of clawrl's GEMM
               benchmarks, and a device copy (torch)
  report       the report from the step outputs in the work directory
               (stdlib)
  selftest     checks of the parsers and formulas (stdlib)

Only the standard library, torch, transformers and safetensors are used;
the torch steps exit with status 3 and print "skipped (no torch)" where
torch (or a GPU it sees) is missing, and scripts/gpu-check reports them
as skipped.
"""

import argparse
import importlib.util
import json
import math
import os
import random
import re
import shutil
import struct
import sys
import time

SKIPPED = 3  # exit status of a step that cannot run here

# Qwen3 shapes: "4b" is Qwen3-4B's; "tiny" is for trying the script.
SHAPES = {
    "4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960),
    "tiny": dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=1024, max_position_embeddings=4096),
}

# The GEMM shapes of cuda/bench_test.go's BenchmarkLinearBF16 (m rows of
# activations, n outputs, k inputs).
GEMM_SHAPES = [(1, 9728, 2560), (32, 9728, 2560), (1, 2560, 9728), (1, 151936, 2560),
               (2048, 4096, 2560), (2048, 1024, 2560), (2048, 2560, 4096), (2048, 9728, 2560),
               (2048, 2560, 9728), (4096, 4096, 4096)]

COPY_BYTES = 1 << 30  # BenchmarkCopy's buffer


def need_torch():
    """Imports torch and transformers, or exits SKIPPED."""
    try:
        import torch
    except ImportError as e:
        print(f"skipped (no torch: {e})")
        sys.exit(SKIPPED)
    if importlib.util.find_spec("transformers") is None:
        print("skipped (no transformers)")
        sys.exit(SKIPPED)
    if not torch.cuda.is_available():
        print("skipped (torch sees no GPU)")
        sys.exit(SKIPPED)
    return torch


# ---------------------------------------------------------------- write-model

def cmd_write_model(a):
    torch = need_torch()
    import transformers
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = SHAPES[a.shape]
    vocab = shape["vocab_size"]
    common = dict(shape, tie_word_embeddings=True, rms_norm_eps=1e-6, initializer_range=a.init_std,
                  bos_token_id=vocab - 2, eos_token_id=vocab - 1, use_sliding_window=False, hidden_act="silu",
                  attention_bias=False)
    try:
        cfg = Qwen3Config(**common, rope_theta=1e6)
    except TypeError:  # a transformers that takes rope_parameters only
        cfg = Qwen3Config(**common, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    t0 = time.time()
    torch.manual_seed(a.seed)
    with torch.device("cuda"):  # float32 first (16 GB for 4B), as transformers builds it
        model = Qwen3ForCausalLM(cfg)
    model = model.to(torch.bfloat16)
    # clawrl's random checkpoints' distribution (model.WriteRandomCheckpoint):
    # matrices and the embedding N(0, std²), norm weights 1 + N(0, 0.1²), so
    # that a backend that ignored a norm's weight would show.
    g = torch.Generator(device="cuda")
    g.manual_seed(a.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(1.0, 0.1, generator=g)
            else:
                p.normal_(0.0, a.init_std, generator=g)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if emb.data_ptr() != head.data_ptr():  # tied in config.json: the head must be the embedding
        with torch.no_grad():
            head.copy_(emb)
    os.makedirs(a.out, exist_ok=True)
    try:
        model.save_pretrained(a.out, safe_serialization=True, max_shard_size="5GB")
    except TypeError:  # a transformers without safe_serialization (always safetensors)
        model.save_pretrained(a.out, max_shard_size="5GB")
    # The weights are BF16: config.json must say so (torch_dtype, or dtype in
    # transformers 5), as a released checkpoint does.
    path = os.path.join(a.out, "config.json")
    c = read_config(a.out)
    if (c.get("torch_dtype") or c.get("dtype")) != "bfloat16":
        c["torch_dtype"] = c["dtype"] = "bfloat16"
        with open(path, "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)
    if a.tokenizer_from:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            src = os.path.join(a.tokenizer_from, f)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(a.out, f))
    c = read_config(a.out)
    rope = {k: v for k, v in c.items() if "rope" in k or k in ("torch_dtype", "dtype", "tie_word_embeddings")}
    print(f"config.json: {json.dumps(rope, sort_keys=True)}")
    files = sorted(os.listdir(a.out))
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in files)
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out}: Qwen3 {a.shape} ({n / 1e9:.3f}B parameters, bf16, init std {a.init_std}), "
          f"{size / 1e9:.2f} GB in {time.time() - t0:.1f} s with torch {torch.__version__}, "
          f"transformers {transformers.__version__}; files: {', '.join(files)}")


# ---------------------------------------------------------------- prompt

def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def cmd_prompt(a):
    vocab = read_config(a.model)["vocab_size"]
    r = random.Random(a.seed)
    ids = [r.randrange(vocab) for _ in range(a.n)]
    with open(a.out, "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    print(f"wrote {a.n} token ids below {vocab} to {a.out}")


# ---------------------------------------------------------------- dumps

def read_ids(path):
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def read_dump(d):
    """A `clawrl bench logits` directory: (meta, greedy ids)."""
    with open(os.path.join(d, "logits.json")) as f:
        meta = json.load(f)
    return meta, read_ids(os.path.join(d, "greedy.txt"))


def prefix_len(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def pct(v, p):
    """The p-th percentile of v (nearest rank)."""
    s = sorted(v)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, int(math.ceil(p / 100 * len(s))) - 1))]


# ---------------------------------------------------------------- compare (torch)

def load_hf(torch, model_dir, dtype, attn):
    """The checkpoint in model_dir on the GPU in dtype, with the attention
    implementation attn, whatever the transformers version's keywords."""
    from transformers import AutoModelForCausalLM
    tries = [dict(dtype=dtype, device_map="cuda", attn_implementation=attn),
             dict(torch_dtype=dtype, device_map="cuda", attn_implementation=attn),
             dict(torch_dtype=dtype, attn_implementation=attn)]
    err = None
    for kw in tries:
        try:
            m = AutoModelForCausalLM.from_pretrained(model_dir, **kw)
            break
        except (TypeError, ValueError, ImportError) as e:  # an unknown keyword, or no accelerate for device_map
            err = e
    else:
        raise err
    p = next(m.parameters())
    if p.dtype != dtype or p.device.type != "cuda":
        m = m.to(device="cuda", dtype=dtype)
    return m.eval()


def hf_greedy(torch, m, prompt, n):
    """n greedy tokens after prompt, one step at a time with the KV cache,
    and the tokens per second of the steps."""
    with torch.no_grad():
        out = m(input_ids=torch.tensor([prompt], device="cuda"), use_cache=True)
        past, tok = out.past_key_values, out.logits[0, -1].argmax()
        toks = [tok]
        torch.cuda.synchronize()
        t0 = time.time()
        for _ in range(n - 1):
            out = m(input_ids=tok.view(1, 1), past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[0, -1].argmax()
            toks.append(tok)
        ids = torch.stack(toks).tolist()
        el = time.time() - t0
    return ids, (n - 1) / max(el, 1e-9)


def load_dump_logits(torch, d, n, g, vocab):
    """The dump's logits on the GPU: n prefill rows, then g-1 decode rows."""
    rows = []
    for name, count in (("prefill.f32", n), ("decode.f32", g - 1)):
        with open(os.path.join(d, name), "rb") as f:
            data = bytearray(f.read())
        if len(data) != 4 * count * vocab:
            raise SystemExit(f"{d}/{name}: {len(data)} bytes, want {count} rows of {vocab} float32")
        if count:
            rows.append(torch.frombuffer(data, dtype=torch.float32).reshape(count, vocab))
    return torch.cat(rows).cuda()


def row_stats(torch, got, ref):
    """Per-row statistics of logits got against ref ([rows, vocab], float32)."""
    d = (got - ref).abs()
    rms = ref.pow(2).mean(dim=1).sqrt()
    top = ref.topk(2, dim=1)
    return dict(maxabs=d.max(dim=1).values, rel=d.max(dim=1).values / rms, rms=rms,
                margin=top.values[:, 0] - top.values[:, 1], a_ref=top.indices[:, 0], a_got=got.argmax(dim=1),
                nan=bool(torch.isnan(got).any().item()))


def summarize(torch, st, rows, noise=None):
    """A JSON-able summary of row_stats over rows (a slice); noise is the
    per-row |Δ| of transformers bf16 against float32, the scale of BF16
    rounding: an argmax that differs where the reference's top-2 margin is
    above twice that is a real disagreement."""
    sl = lambda t: t[rows]  # noqa: E731
    maxabs, rel, margin = sl(st["maxabs"]), sl(st["rel"]), sl(st["margin"])
    diff = sl(st["a_ref"]) != sl(st["a_got"])
    out = dict(rows=int(maxabs.numel()), max_abs=float(maxabs.max()), max_rel=float(rel.max()),
               p50_rel=float(rel.median()), logit_rms=float(sl(st["rms"]).mean()),
               argmax_diff=int(diff.sum()))
    if noise is not None:
        out["argmax_diff_beyond_noise"] = int((diff & (margin > 2 * noise[rows])).sum())
    return out


def cmd_compare(a):
    torch = need_torch()
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    prompt = read_ids(a.prompt)
    meta, greedy = read_dump(a.dump)
    vocab, n, g = meta["vocab_size"], len(prompt), len(greedy)
    if meta["prompt_tokens"] != n:
        raise SystemExit(f"the dump has {meta['prompt_tokens']} prompt tokens, {a.prompt} {n}")
    got = load_dump_logits(torch, a.dump, n, g, vocab)
    ids = torch.tensor([prompt + greedy[:-1]], device="cuda")  # teacher-forced on clawrl's tokens
    res = dict(prompt_tokens=n, greedy_tokens=g, vocab=vocab, clawrl_backend=meta["backend"],
               torch=torch.__version__, transformers=transformers.__version__, gpu=torch.cuda.get_device_name(0))
    t0 = time.time()

    ref_model = load_hf(torch, a.model, torch.float32, "eager")
    with torch.no_grad():
        ref = ref_model(input_ids=ids).logits[0].float()
    g32, _ = hf_greedy(torch, ref_model, prompt, g)
    del ref_model
    torch.cuda.empty_cache()
    bf_model = load_hf(torch, a.model, torch.bfloat16, "sdpa")
    with torch.no_grad():
        bf = bf_model(input_ids=ids).logits[0].float()
    g16, bf_tps = hf_greedy(torch, bf_model, prompt, g)
    del bf_model
    torch.cuda.empty_cache()

    base = row_stats(torch, bf, ref)  # transformers bf16 against float32: BF16 rounding
    st = row_stats(torch, got, ref)
    vs_bf = row_stats(torch, got, bf)
    noise = base["maxabs"]
    parts = dict(prefill=slice(0, n), decode=slice(n, n + g - 1), all=slice(0, n + g - 1))
    res["clawrl_vs_fp32"] = {k: summarize(torch, st, s, noise) for k, s in parts.items()}
    res["hf_bf16_vs_fp32"] = {k: summarize(torch, base, s) for k, s in parts.items()}
    res["clawrl_vs_hf_bf16"] = {k: summarize(torch, vs_bf, s) for k, s in parts.items()}
    res["nan"] = st["nan"]
    res["greedy"] = dict(clawrl_vs_fp32=prefix_len(greedy, g32), hf_bf16_vs_fp32=prefix_len(g16, g32),
                         clawrl_vs_hf_bf16=prefix_len(greedy, g16), tokens=g)
    k = res["greedy"]["clawrl_vs_fp32"]
    if k < g:  # the rows are teacher-forced on clawrl's tokens: row n-1+k saw the same context as fp32
        r = n - 1 + k
        res["greedy"]["first_divergence"] = dict(
            token=k, fp32_margin=float(st["margin"][r]), bf16_noise=float(noise[r]),
            near_tie=bool(float(st["margin"][r]) <= 2 * float(noise[r])))
    res["hf_bf16_greedy_tok_s"] = bf_tps
    res["seconds"] = time.time() - t0
    a_all, b_all = res["clawrl_vs_fp32"]["all"], res["hf_bf16_vs_fp32"]["all"]
    res["logits_ok"] = (not res["nan"]) and a_all["max_rel"] <= max(1.5 * b_all["max_rel"], 0.02)
    res["greedy_ok"] = a_all["argmax_diff_beyond_noise"] == 0
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(format_compare(res))
    if not (res["logits_ok"] and res["greedy_ok"]):
        sys.exit(1)


def format_compare(res):
    lines = [f"transformers {res['transformers']}, torch {res['torch']} on {res['gpu']}; "
             f"clawrl on {res['clawrl_backend']}; {res['prompt_tokens']}-token prompt, {res['greedy_tokens']} greedy tokens"]
    lines.append(f"  {'logits against transformers float32':44} {'rows':>5} {'max|Δ|':>9} {'max|Δ|/rms':>11} "
                 f"{'p50 |Δ|/rms':>11} {'argmax≠':>8} {'beyond noise':>12}")
    for name, key in (("clawrl (CUDA)", "clawrl_vs_fp32"), ("transformers bf16 (BF16 rounding)", "hf_bf16_vs_fp32"),
                      ("clawrl vs transformers bf16", "clawrl_vs_hf_bf16")):
        for part in ("prefill", "decode"):
            s = res[key][part]
            lines.append(f"  {name + ', ' + part:44} {s['rows']:5d} {s['max_abs']:9.4f} {s['max_rel']:11.4f} "
                         f"{s['p50_rel']:11.4f} {s['argmax_diff']:8d} {s.get('argmax_diff_beyond_noise', '-'):>12}")
    gr = res["greedy"]
    lines.append(f"  greedy tokens equal to float32's: clawrl {gr['clawrl_vs_fp32']}/{gr['tokens']}, "
                 f"transformers bf16 {gr['hf_bf16_vs_fp32']}/{gr['tokens']}; clawrl vs transformers bf16 "
                 f"{gr['clawrl_vs_hf_bf16']}/{gr['tokens']}")
    if "first_divergence" in gr:
        d = gr["first_divergence"]
        lines.append(f"  clawrl's first divergence at token {d['token']}: float32's top-2 margin {d['fp32_margin']:.4f}, "
                     f"BF16 noise there {d['bf16_noise']:.4f}: " + ("a near tie" if d["near_tie"] else "NOT a near tie"))
    lines.append(f"  logits within BF16 rounding (max |Δ|/rms ≤ 1.5× transformers bf16's, or 0.02): "
                 f"{'yes' if res['logits_ok'] else 'NO'}; argmax differs only at near ties: {'yes' if res['greedy_ok'] else 'NO'}")
    return "\n".join(lines)


def cmd_export_check(a):
    """transformers loads a `clawrl export` directory (float32 LoRA merges)
    and computes the logits clawrl computed for it (dump a.dump)."""
    torch = need_torch()
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    prompt = read_ids(a.prompt)
    meta, greedy = read_dump(a.dump)
    vocab, n, g = meta["vocab_size"], len(prompt), len(greedy)
    got = load_dump_logits(torch, a.dump, n, g, vocab)
    cfg = read_config(a.model)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(cfg.get("torch_dtype") or cfg.get("dtype"), torch.float32)
    m = load_hf(torch, a.model, dtype, "eager")
    with torch.no_grad():
        ref = m(input_ids=torch.tensor([prompt + greedy[:-1]], device="cuda")).logits[0].float()
    st = row_stats(torch, got, ref)
    res = dict(transformers=transformers.__version__, dtype=str(dtype).replace("torch.", ""), rows=int(ref.shape[0]),
               max_abs=float(st["maxabs"].max()), max_rel=float(st["rel"].max()),
               argmax_diff=int((st["a_ref"] != st["a_got"]).sum()), clawrl_backend=meta["backend"])
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(a.model)
        res["tokenizer"] = f"loads ({type(tok).__name__}, {len(tok)} tokens)"
    except Exception as e:  # noqa: BLE001 (reported, not fatal: the weights are what is checked)
        res["tokenizer"] = f"does not load: {type(e).__name__}: {str(e)[:120]}"
    res["ok"] = res["max_rel"] <= a.tol and not st["nan"]
    res["summary"] = (f"{'yes' if res['ok'] else 'NO'}: transformers {res['transformers']} ({res['dtype']}) against clawrl on "
                      f"{res['clawrl_backend']}, {res['rows']} rows: max |Δ| {res['max_abs']:.3g}, max |Δ|/rms {res['max_rel']:.3g}, "
                      f"argmax differs in {res['argmax_diff']}; tokenizer {res['tokenizer']}")
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(res["summary"])
    if not res["ok"]:
        sys.exit(1)


# ---------------------------------------------------------------- compare-dumps (stdlib)

def read_floats(path):
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack(f"<{len(data) // 4}f", data)


def cmd_compare_dumps(a):
    """Compares dump a.got with dump a.ref (same prompt), in pure Python:
    for small models only."""
    mg, gg = read_dump(a.got)
    mr, gr = read_dump(a.ref)
    vocab = mr["vocab_size"]
    rows = []
    for d in (a.got, a.ref):
        rows.append(read_floats(os.path.join(d, "prefill.f32")) + read_floats(os.path.join(d, "decode.f32")))
    got, ref = rows
    k = min(len(got), len(ref)) // vocab
    k = min(k, mr["prompt_tokens"] + prefix_len(gg, gr))  # rows after a divergence saw other tokens
    rels, diff = [], 0
    worst = 0.0
    for r in range(k):
        g_row, r_row = got[r * vocab:(r + 1) * vocab], ref[r * vocab:(r + 1) * vocab]
        rms = math.sqrt(sum(x * x for x in r_row) / vocab)
        m = max(abs(x - y) for x, y in zip(g_row, r_row))
        worst = max(worst, m)
        rels.append(m / rms if rms > 0 else float("inf"))
        if max(range(vocab), key=g_row.__getitem__) != max(range(vocab), key=r_row.__getitem__):
            diff += 1
    res = dict(got=mg["backend"], ref=mr["backend"], rows=k, max_abs=worst, max_rel=max(rels), p50_rel=pct(rels, 50),
               argmax_diff=diff, greedy_equal=prefix_len(gg, gr), greedy_tokens=len(gr))
    res["ok"] = res["max_rel"] <= a.tol and not math.isnan(res["max_rel"])
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"{res['got']} vs {res['ref']}: {k} rows, max |Δ| {worst:.4g}, max |Δ|/rms {res['max_rel']:.4g} "
          f"(p50 {res['p50_rel']:.4g}), argmax differs in {diff}; greedy equal for {res['greedy_equal']}/{len(gr)} tokens")
    if not res["ok"]:
        sys.exit(1)


# ---------------------------------------------------------------- torch-bench

def cmd_torch_bench(a):
    torch = need_torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")

    def timed(fn, min_ms=30.0):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        iters = 1
        while True:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(iters):
                fn()
            e.record()
            e.synchronize()
            ms = s.elapsed_time(e)
            if ms >= min_ms or iters >= 1 << 14:
                return ms / 1e3 / iters
            iters *= 2

    out = dict(gpu=torch.cuda.get_device_name(0), torch=torch.__version__, gemm=[])
    for m, n, k in GEMM_SHAPES:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        sec = timed(lambda x=x, w=w: torch.nn.functional.linear(x, w))
        out["gemm"].append(dict(m=m, n=n, k=k, us=sec * 1e6, tflops=2 * m * n * k / sec / 1e12,
                                gbs=(2 * n * k + 2 * m * (k + n)) / sec / 1e9))
        del x, w
    src = torch.empty(COPY_BYTES // 4, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    sec = timed(lambda: dst.copy_(src))
    out["copy_gbs"] = 2 * COPY_BYTES / sec / 1e9
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"torch {out['torch']} on {out['gpu']}: copy {out['copy_gbs']:.0f} GB/s (read+write)")
    for g in out["gemm"]:
        print(f"  linear bf16 m{g['m']} n{g['n']} k{g['k']}: {g['tflops']:.1f} TFLOP/s ({g['us']:.1f} µs)")


# ---------------------------------------------------------------- report (stdlib)

BENCH_RE = re.compile(r"^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$")


def parse_go_bench(text):
    """Go benchmark lines → {name: {unit: value}} (the GOMAXPROCS suffix
    dropped)."""
    out = {}
    for line in text.splitlines():
        m = BENCH_RE.match(line.strip())
        if not m:
            continue
        metrics = {}
        for v, unit in re.findall(r"([-+0-9.eE]+)\s+(\S+)", m.group(3)):
            try:
                metrics[unit] = float(v)
            except ValueError:
                pass
        out[m.group(1)] = metrics
    return out


def parse_go_test(text):
    """go test -v output → (passed, failed, skipped top-level tests, final line)."""
    res = {"PASS": [], "FAIL": [], "SKIP": []}
    for m in re.finditer(r"^--- (PASS|FAIL|SKIP): (\S+)", text, re.M):
        if "/" not in m.group(2):
            res[m.group(1)].append(m.group(2))
    final = [ln for ln in text.splitlines() if ln.strip() in ("PASS", "FAIL") or ln.startswith(("ok ", "FAIL", "panic:"))]
    return res["PASS"], res["FAIL"], res["SKIP"], (final[-1] if final else "")


def failure_lines(text, per_test=8):
    """The log lines of the failed tests of go test -v output (and panics),
    at most per_test for each test."""
    current, lines, out = None, {}, []
    for ln in text.splitlines():
        m = re.match(r"^=== (?:RUN|CONT|PAUSE|NAME)\s+(\S+)", ln)
        if m:
            current = m.group(1)
            continue
        m = re.match(r"^\s*--- FAIL: (\S+)", ln)
        if m:
            out.append(ln.strip())
            out.extend("  " + x for x in lines.get(m.group(1), [])[:per_test])
            continue
        if ln.startswith("panic:") or ln.startswith("fatal error:"):
            out.append(ln.strip())
        elif current and re.match(r"^\s+\S+\.go:\d+:", ln):
            lines.setdefault(current, []).append(ln.strip()[:200])
    return out


def bench_rows(path):
    """A `clawrl bench --json` file → {measurement: row}."""
    try:
        with open(path) as f:
            return {r["measurement"]: r for r in json.load(f)}
    except (OSError, ValueError):
        return {}


def row_value(rows, prefix):
    for name, r in rows.items():
        if name.startswith(prefix) and r.get("value") is not None:
            return r["value"], name
    return None, None


def num_params(c):
    """model.Config.NumParams: the LM head counted once when tied."""
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv, inter = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd, c["intermediate_size"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * inter + 2 * h + 2 * hd
    n = vocab * h + layers * layer + h
    if not c.get("tie_word_embeddings", False):
        n += vocab * h
    return n


def weight_bytes_per_token(c):
    """cli's weightBytesPerToken: every matrix once, the LM head whole, one
    embedding row."""
    size = 2 if (c.get("torch_dtype") or c.get("dtype")) in ("bfloat16", "float16") else 4
    n = num_params(c)
    if not c.get("tie_word_embeddings", False):
        n -= c["vocab_size"] * c["hidden_size"]
    return n * size


def prefill_flops(c, n):
    """cli's prefillFlops: the layers' products for n tokens, causal
    attention, the LM head for the last token."""
    h, inter = c["hidden_size"], c["intermediate_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    layer = h * q + 2 * h * kv + q * h + 3 * h * inter
    keys = n * (n + 1) / 2
    return c["num_hidden_layers"] * (2 * layer * n + 4 * q * keys) + 2 * c["vocab_size"] * h


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(v, spec=".1f", none="—"):
    return none if v is None else format(v, spec)


def cmd_report(a):
    w = a.work
    steps = []
    for line in read_text(os.path.join(w, "steps.tsv")).splitlines():
        parts = line.split("\t")
        if len(parts) >= 4:
            steps.append(dict(name=parts[0], status=parts[1], seconds=float(parts[2]), note=parts[3], kind=parts[4] if len(parts) > 4 else ""))
    status = {s["name"]: s["status"] for s in steps}
    log = lambda name: read_text(os.path.join(w, "logs", name + ".log"))  # noqa: E731
    info = read_json(os.path.join(w, "info.json")) or {}
    out = []
    p = out.append
    mode = "DRY RUN on the fake libcuda (emulated GPU, tiny model): plumbing only, no GPU numbers" if info.get("fake") else "real GPU"
    p(f"clawrl GPU check: {mode}")
    p(f"revision {info.get('revision', '?')}, {info.get('date', '?')}, {info.get('host', '?')}, "
      f"{sum(s['seconds'] for s in steps):.0f} s of steps (budget {info.get('budget', '?')} s)")
    p("")

    p("== Machine")
    smi = log("nvidia-smi")
    if status.get("nvidia-smi") == "ok":
        keep = [ln for ln in smi.splitlines() if ln.strip() and not set(ln.strip()) <= set("+-=|")]
        p("\n".join("  " + ln.strip() for ln in keep[:8]))
    else:
        p(f"  nvidia-smi: {status.get('nvidia-smi', 'not run')}")
    p("\n".join("  " + ln for ln in log("devices").strip().splitlines()) or "  clawrl devices: no output")
    for ln in log("write-model").splitlines():
        if ln.startswith(("wrote ", "config.json:")):
            p("  checkpoint: " + ln)
    p("")

    p("== Steps")
    for s in steps:
        note = f"  ({s['note']})" if s["note"] else ""
        p(f"  {s['name']:<14} {s['status']:<26} {s['seconds']:6.1f} s{note}")
    p("")

    p("== Correctness")
    passed, failed, skipped, final = parse_go_test(log("conformance"))
    if status.get("conformance") in (None, "not run"):
        p("  cuda tests: not run")
    else:
        p(f"  cuda tests ({'the real GPU' if not info.get('fake') else 'the fake driver'}): {len(passed)} passed, "
          f"{len(failed)} failed, {len(skipped)} skipped; {final.strip() or status.get('conformance')}")
        if failed:
            p("    failed: " + ", ".join(failed))
        for ln in failure_lines(log("conformance")):
            p("    " + ln)
    cmp_ = read_json(os.path.join(w, "compare.json"))
    if cmp_:
        p("  logits and greedy tokens against Hugging Face transformers:")
        p("\n".join("  " + ln for ln in format_compare(cmp_).splitlines()))
    else:
        p(f"  transformers comparison: {status.get('compare', 'not run')}")
    cd = read_json(os.path.join(w, "compare-cpu.json"))
    if cd:
        p(f"  clawrl {cd['got']} vs clawrl {cd['ref']}: max |Δ|/rms {cd['max_rel']:.4g} over {cd['rows']} rows, "
          f"argmax differs in {cd['argmax_diff']}, greedy equal {cd['greedy_equal']}/{cd['greedy_tokens']}")
    ex = read_json(os.path.join(w, "export.json"))
    if ex:
        p(f"  transformers loads `clawrl export`: {ex.get('summary', ex)}")
    elif "export" in status:
        p(f"  export check: {status['export']}")
    p("")

    # Performance.
    cfg = read_json(os.path.join(w, "model", "config.json")) or {}
    gpu = bench_rows(os.path.join(w, "bench-gpu.json"))
    for name, r in bench_rows(os.path.join(w, "bench-16k.json")).items():
        if "context" in name or "after" in name:
            gpu[name] = r
    cpu = bench_rows(os.path.join(w, "bench-cpu.json"))
    tb = read_json(os.path.join(w, "torch-bench.json")) or {}
    kb = parse_go_bench(log("kernels"))
    p("== Performance" + (f" ({cfg.get('num_hidden_layers')} layers, hidden {cfg.get('hidden_size')}, "
                          f"vocab {cfg.get('vocab_size')})" if cfg else ""))
    b1, _ = row_value(gpu, "decode, batch 1")
    b32, b32name = row_value(gpu, "decode, batch 32")
    pf2k, pf2kname = row_value(gpu, "prefill, 2048 tokens")
    pf16k, pf16kname = row_value(gpu, "prefill, 16384-token context")
    dcopy, _ = row_value(gpu, "device copy")
    vcopy, _ = row_value(gpu, "version copy")
    cpu_pf, cpu_pfname = row_value(cpu, "prefill, ")
    tcopy = tb.get("copy_gbs")
    kcopy = kb.get("BenchmarkCopy", {}).get("GB/s")
    hbm = max([v for v in (tcopy, kcopy, dcopy) if v] or [0]) or None
    wb = weight_bytes_per_token(cfg) if cfg else None
    for name, r in gpu.items():
        if r.get("value") is not None:
            v = r["value"]
            p(f"  {name:<34} {format(v, '.0f' if abs(v) >= 100 else '.3g'):>10} {r['unit']:<6} {r['note']}")
    if not gpu:
        p(f"  clawrl bench on the GPU: {status.get('bench-gpu', 'not run')}")
    p(f"  HBM copy bandwidth (read+write): torch {fmt(tcopy, '.0f')} GB/s, clawrl's kernel benchmark {fmt(kcopy, '.0f')} GB/s, "
      f"clawrl bench {fmt(dcopy, '.0f')} GB/s" + (f"; clawrl/torch {kcopy / tcopy:.2f}" if kcopy and tcopy else ""))
    if cpu_pf:
        p(f"  CPU ({cpu_pfname}, same box): {cpu_pf:.1f} tok/s")
    p("  GEMM, BF16 weights (TFLOP/s):       clawrl    torch  clawrl/torch")
    torch_g = {(g["m"], g["n"], g["k"]): g for g in tb.get("gemm", [])}
    gemm4096 = None
    for m, n, k in GEMM_SHAPES:
        c = kb.get(f"BenchmarkLinearBF16/m{m}_n{n}_k{k}", {}).get("TFLOP/s")
        t = torch_g.get((m, n, k), {}).get("tflops")
        ratio = c / t if c and t else None
        if (m, n, k) == (4096, 4096, 4096):
            gemm4096 = ratio
        p(f"    m{m:<5} n{n:<7} k{k:<6}          {fmt(c, '7.1f'):>7}  {fmt(t, '7.1f'):>7}  {fmt(ratio, '.2f'):>6}")
    for key in sorted(kb):
        if key.startswith("BenchmarkAttention"):
            p(f"  {key[len('Benchmark'):]:<34} " + ", ".join(f"{v:.4g} {u}" for u, v in kb[key].items() if u != "ns/op"))
    p("")

    # Goals.
    p("== Goals (issue 27), on " + (tb.get("gpu") or (cmp_ or {}).get("gpu") or "the GPU"))

    def goal(what, measured, ok):
        mark = ok if isinstance(ok, str) else {True: "MET", False: "NOT MET", None: "not measured"}[ok]
        if info.get("fake"):
            mark = "(dry run)"
        p(f"  {what:<44} {mark:<13} {measured}")

    if cmp_:
        gr = cmp_["greedy"]
        near = ""
        if "first_divergence" in gr:
            d = gr["first_divergence"]
            near = f"; first divergence at token {d['token']} " + ("(a near tie)" if d["near_tie"] else "(NOT a near tie)")
        beyond = cmp_["clawrl_vs_fp32"]["all"]["argmax_diff_beyond_noise"]
        # Random weights give near-Gaussian logits whose top two are often
        # closer than BF16 rounding moves them (transformers' own bf16 leaves
        # float32's greedy path too): a divergence at a near tie, with no
        # argmax that differs beyond the noise, is BF16's, not a bug's.
        ok = gr["clawrl_vs_fp32"] >= gr["tokens"]
        if not ok and beyond == 0 and gr.get("first_divergence", {}).get("near_tie"):
            ok = "BF16 NOISE"
        goal("greedy = transformers for 256 tokens", f"{gr['clawrl_vs_fp32']}/{gr['tokens']} vs float32 (transformers bf16: "
             f"{gr['hf_bf16_vs_fp32']}/{gr['tokens']}){near}; argmax differing beyond BF16 noise: {beyond} of "
             f"{cmp_['clawrl_vs_fp32']['all']['rows']} positions", ok)
        a_, b_ = cmp_["clawrl_vs_fp32"]["all"], cmp_["hf_bf16_vs_fp32"]["all"]
        goal("max |Δ logit| within BF16 rounding", f"{a_['max_abs']:.3f} ({a_['max_rel']:.3f} of the logits' rms); transformers "
             f"bf16 {b_['max_abs']:.3f} ({b_['max_rel']:.3f})", cmp_["logits_ok"])
    else:
        goal("greedy = transformers for 256 tokens", status.get("compare", "not run"), None)
        goal("max |Δ logit| within BF16 rounding", status.get("compare", "not run"), None)
    if b1 and wb and hbm:
        frac = b1 * wb / (hbm * 1e9)
        goal("decode batch 1 ≥ 70% of HBM bandwidth", f"{frac:.0%}: {b1:.1f} tok/s × {wb / 1e9:.2f} GB of weights = "
             f"{b1 * wb / 1e9:.0f} GB/s of {hbm:.0f} GB/s measured copy", frac >= 0.7)
    else:
        goal("decode batch 1 ≥ 70% of HBM bandwidth", f"decode {fmt(b1)} tok/s, copy {fmt(hbm, '.0f')} GB/s", None)
    goal("GEMM ≥ 60% of torch.matmul (4096³)", f"{fmt(gemm4096, '.0%')} of cuBLAS", None if gemm4096 is None else gemm4096 >= 0.6)
    if pf16k and cpu_pf and cfg:
        n_cpu = int(re.search(r"(\d+)", cpu_pfname).group(1))
        # The CPU's 16k prefill extrapolated from a shorter one at the same
        # FLOP rate (its attention share grows with the context): generous
        # to the CPU.
        t16 = (n_cpu / cpu_pf) * prefill_flops(cfg, 16384) / prefill_flops(cfg, n_cpu)
        cpu16 = 16384 / t16
        goal("prefill 16k ≥ 10× the CPU", f"{pf16k / cpu16:.0f}×: GPU {pf16k:.0f} tok/s, CPU ~{cpu16:.1f} tok/s "
             f"(extrapolated from {n_cpu} tokens at {cpu_pf:.1f} tok/s at the same FLOP rate)", pf16k / cpu16 >= 10)
    else:
        goal("prefill 16k ≥ 10× the CPU", f"GPU {fmt(pf16k, '.0f')} tok/s, CPU {fmt(cpu_pf)} tok/s", None)
    if vcopy is not None:
        goal("version live within 1 s", f"{vcopy:.2f} s to copy every tensor of a version CPU → GPU (engine mirror; "
             "request continuity during the swap not measured here)", vcopy <= 1)
    else:
        goal("version live within 1 s", status.get("bench-gpu", "not run"), None)
    if b32:
        p(f"  (also: decode batch 32 {b32:.0f} tok/s, prefill 2k {fmt(pf2k, '.0f')} tok/s"
          + (f", transformers bf16 greedy {cmp_['hf_bf16_greedy_tok_s']:.1f} tok/s" if cmp_ else "") + ")")
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(w, "report.txt"), "w") as f:
        f.write(text)


# ---------------------------------------------------------------- selftest

def cmd_selftest(_):
    sample = ("goos: linux\nBenchmarkLinearBF16/m1_n9728_k2560-16   \t      20\t     51234 ns/op\t       812.5 GB/s\t"
              "0.9700 TFLOP/s\t        51.20 us/op\nBenchmarkCopy-16   20   700000 ns/op   3050 GB/s   700.0 us/op\nPASS\n")
    b = parse_go_bench(sample)
    assert b["BenchmarkLinearBF16/m1_n9728_k2560"]["TFLOP/s"] == 0.97, b
    assert b["BenchmarkCopy"]["GB/s"] == 3050, b
    log = ("=== RUN   TestA\n    a_test.go:3: fine\n--- PASS: TestA (0.1s)\n=== RUN   TestB\n=== RUN   TestB/x\n"
           "    b_test.go:9: wrong: 1 != 2\n    --- FAIL: TestB/x (0.1s)\n--- FAIL: TestB (0.2s)\n--- SKIP: TestC (0.0s)\nFAIL\n")
    t = parse_go_test(log)
    assert t[:3] == (["TestA"], ["TestB"], ["TestC"]), t
    f = failure_lines(log)
    assert f == ["--- FAIL: TestB/x (0.1s)", "  b_test.go:9: wrong: 1 != 2", "--- FAIL: TestB (0.2s)"], f
    c = dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
             head_dim=128, vocab_size=151936, tie_word_embeddings=True, torch_dtype="bfloat16")
    assert abs(num_params(c) / 1e9 - 4.02) < 0.01, num_params(c)
    assert abs(weight_bytes_per_token(c) / 1e9 - 8.04) < 0.01
    assert prefill_flops(c, 16384) > 16384 * 2 * 3.6e9
    assert prefix_len([1, 2, 3], [1, 2, 4]) == 2 and pct([3, 1, 2], 50) == 2
    print("selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("write-model")
    s.add_argument("--out", required=True)
    s.add_argument("--shape", choices=sorted(SHAPES), default="4b")
    s.add_argument("--init-std", type=float, default=0.02)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--tokenizer-from", default="")
    s.set_defaults(fn=cmd_write_model)
    s = sub.add_parser("prompt")
    s.add_argument("--model", required=True)
    s.add_argument("--n", type=int, default=300)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_prompt)
    s = sub.add_parser("compare")
    s.add_argument("--model", required=True)
    s.add_argument("--prompt", required=True)
    s.add_argument("--dump", required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_compare)
    s = sub.add_parser("export-check")
    s.add_argument("--model", required=True, help="the exported directory")
    s.add_argument("--prompt", required=True)
    s.add_argument("--dump", required=True, help="clawrl bench logits of the exported directory")
    s.add_argument("--tol", type=float, default=1e-3, help="largest max |Δ|/rms accepted (float32 on both sides)")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_export_check)
    s = sub.add_parser("compare-dumps")
    s.add_argument("--got", required=True)
    s.add_argument("--ref", required=True)
    s.add_argument("--tol", type=float, default=0.05, help="largest max |Δ|/rms accepted")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_compare_dumps)
    s = sub.add_parser("torch-bench")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_torch_bench)
    s = sub.add_parser("report")
    s.add_argument("--work", required=True)
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser("selftest")
    s.set_defaults(fn=cmd_selftest)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
