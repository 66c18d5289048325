"""The `local` backend: a transformers causal LM with a peft LoRA adapter, trained in this process (GPU or CPU).
Same loss semantics as Tinker; `model: tiny-random` builds a small random model and tokenizer in code (no download)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Sequence

from core.backends.base import (STOP_EOS, STOP_LENGTH, AdamParams, ChatRendering, CheckpointPaths, Datum, Prompt,
                                SampleContext, SampledSequence, SamplingParams, check_loss_kind, token_loss)
from core.backends.tokenizer import HFTokenizer
from core.errors import KrlError
from core.losses import add_sums, sample_train_sums

TINY_RANDOM = "tiny-random"


# ---------------------------------------------------------------- tiny-random tokenizer and chat template

class TinyTokenizer:
    """Byte-level tokenizer with a few chat and format tokens; built in code so tests need no download."""

    SPECIALS = ("<|pad|>", "<|bos|>", "<|im_end|>", "<|im_start|>", "<think>", "</think>", "<KERNEL>", "</KERNEL>",
                "\n```python\n", "\n```")

    def __init__(self) -> None:
        self.special_ids = {text: i for i, text in enumerate(self.SPECIALS)}
        self.byte_offset = len(self.SPECIALS)
        self.vocab_size = self.byte_offset + 256
        self.pad_token_id = self.special_ids["<|pad|>"]
        self.eos_token_id = self.special_ids["<|im_end|>"]
        # Longest first, so "\n```python\n" wins over "\n```".
        self._by_length = sorted(self.SPECIALS, key=len, reverse=True)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        i = 0
        while i < len(text):
            for special in self._by_length:
                if text.startswith(special, i):
                    ids.append(self.special_ids[special])
                    i += len(special)
                    break
            else:
                ids.extend(self.byte_offset + b for b in text[i].encode("utf-8"))
                i += 1
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        parts: list[str] = []
        pending = bytearray()
        for token in ids:
            if token >= self.byte_offset:
                pending.append(token - self.byte_offset)
                continue
            if pending:
                parts.append(pending.decode("utf-8", errors="replace"))
                pending = bytearray()
            if token != self.pad_token_id:
                parts.append(self.SPECIALS[token])
        if pending:
            parts.append(pending.decode("utf-8", errors="replace"))
        return "".join(parts)

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        # Qwen3-like template that pre-fills the assistant's `<think>` (exercises the parser's prefilled path).
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + "<|im_start|>assistant\n<think>\n"


# Output biases for TinyTokenizer's format tokens (ids: see SPECIALS): about 2-3 % each per position instead of 0.4 %.
_TINY_TOKEN_BIAS = {2: 1.7, 5: 1.7, 6: 1.4, 7: 1.4, 8: 2.1, 9: 2.1}


def tiny_random_model(vocab_size: int, seed: int = 0):
    """A 2-layer Llama with tiny dims and fixed random weights (same in every process)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    # Near-uniform logits would never stop or open a code block; a biased output layer makes responses end on their
    # own, close their thinking and hold fenced blocks some of the time (so rewards vary within a group).
    head = torch.nn.Linear(config.hidden_size, vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        for token_id, bias in _TINY_TOKEN_BIAS.items():
            head.bias[token_id] = bias
    model.lm_head = head
    return model


# ---------------------------------------------------------------- the backend

class LocalBackend(ChatRendering):
    """transformers + peft LoRA; sampling and training serialised by one lock (deterministic, simple)."""

    name = "local"
    can_train = True

    def __init__(self, model: str = TINY_RANDOM, lora_rank: int = 8, device: str | None = None, seed: int = 0,
                 dtype: str | None = None) -> None:
        import torch

        self._torch = torch
        self.model_name = model
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self._lock = threading.RLock()
        if model == TINY_RANDOM:
            self.tokenizer: Any = TinyTokenizer()
            base = tiny_random_model(self.tokenizer.vocab_size)
            self._stop_ids = {self.tokenizer.eos_token_id}
            target_modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        else:
            base, self.tokenizer = self._load_pretrained(model, dtype)
            self._stop_ids = self.tokenizer.stop_ids()
            target_modules = "all-linear"
        from peft import LoraConfig, get_peft_model

        state = torch.random.get_rng_state()
        torch.manual_seed(seed)  # LoRA A matrices are random: seed them so every process starts identically
        try:
            self.model = get_peft_model(base, LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0,
                                                         target_modules=target_modules))
        finally:
            torch.random.set_rng_state(state)
        self.model.to(self.device)
        self.model.eval()  # no dropout anywhere: sampling and training see the same function
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self._params, lr=1e-4, betas=(0.9, 0.95), eps=1e-12, weight_decay=0.0)

    @staticmethod
    def _load_pretrained(model: str, dtype: str | None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        default_dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
        torch_dtype = getattr(torch, dtype) if dtype else default_dtype
        try:
            tokenizer = AutoTokenizer.from_pretrained(model)
            base = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
        except (OSError, ValueError) as exc:
            raise KrlError(f"cannot load model '{model}' for the local backend: {exc}. Give a local model folder or "
                           "a hub id that is downloaded, or use model=tiny-random for a CPU smoke run.") from None
        return base, HFTokenizer(tokenizer)

    # ------------------------------------------------------------ prompts

    # ------------------------------------------------------------ sampling

    def sample(self, prompt: Prompt, n: int, params: SamplingParams,
               context: SampleContext | None = None) -> list[SampledSequence]:
        torch = self._torch
        if not prompt.tokens:
            raise ValueError("the local backend needs prompt tokens; build prompts with backend.render()")
        generator = torch.Generator(device="cpu")
        generator.manual_seed(int(params.seed) if params.seed is not None else int(torch.seed() % 2**63))
        with self._lock, torch.no_grad():
            input_ids = torch.tensor([prompt.tokens] * n, device=self.device)
            out = self.model(input_ids=input_ids, use_cache=True)
            cache = out.past_key_values
            logits = out.logits[:, -1, :].float()
            tokens: list[list[int]] = [[] for _ in range(n)]
            logprobs: list[list[float]] = [[] for _ in range(n)]
            done = [False] * n
            for _ in range(max(1, params.max_tokens)):
                log_p = torch.log_softmax(logits, dim=-1)
                probs = self._sampling_probs(logits, params).cpu()
                chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
                for i in range(n):
                    if done[i]:
                        continue
                    token = int(chosen[i])
                    tokens[i].append(token)
                    logprobs[i].append(float(log_p[i, token]))
                    if token in self._stop_ids:
                        done[i] = True
                if all(done):
                    break
                out = self.model(input_ids=chosen.view(n, 1).to(self.device), past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                logits = out.logits[:, -1, :].float()
        results = []
        for i in range(n):
            stopped = bool(tokens[i]) and tokens[i][-1] in self._stop_ids
            text_tokens = tokens[i][:-1] if stopped else tokens[i]
            results.append(SampledSequence(text=self.tokenizer.decode(text_tokens), tokens=tokens[i],
                                           logprobs=logprobs[i], stop_reason=STOP_EOS if stopped else STOP_LENGTH))
        return results

    def _sampling_probs(self, logits, params: SamplingParams):
        torch = self._torch
        # Logprobs are reported at temperature 1 (what forward_backward computes); temperature only shapes the draw.
        scaled = logits / max(params.temperature, 1e-5)
        probs = torch.softmax(scaled, dim=-1)
        if params.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True, dim=-1)
            keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
            sorted_probs = sorted_probs * keep
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs

    def token_logprobs(self, datum: Datum):
        """Logprob of each target token under the current weights (with grad)."""
        torch = self._torch
        input_ids = torch.tensor([datum.input_tokens], device=self.device)
        logits = self.model(input_ids=input_ids).logits[0].float()
        targets = torch.tensor(datum.target_tokens, device=self.device)
        return torch.log_softmax(logits, dim=-1).gather(1, targets.view(-1, 1)).squeeze(1)

    def base_logprobs(self, datums: Sequence[Datum]) -> list[list[float]]:
        """Target logprobs under the base model: the same forward pass with the LoRA adapter switched off."""
        torch = self._torch
        with self._lock, torch.no_grad(), self.model.disable_adapter():
            return [[lp * m for lp, m in zip(self.token_logprobs(d).cpu().tolist(), d.action_mask())]
                    for d in datums]

    # ------------------------------------------------------------ training

    def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                         loss_fn_config: dict[str, float] | None = None) -> dict[str, float]:
        check_loss_kind(loss_fn)
        torch = self._torch
        metrics: dict[str, float] = {"loss:sum": 0.0, "tokens": 0.0}
        with self._lock:
            for datum in datums:
                new_lp = self.token_logprobs(datum)
                old_lp = torch.tensor(datum.logprobs, device=self.device)
                adv = torch.tensor(datum.advantages, device=self.device)
                loss = token_loss(new_lp, old_lp, adv, loss_fn, loss_fn_config).sum()
                loss.backward()
                metrics["loss:sum"] += float(loss.detach())
                mask = datum.action_mask()
                metrics["tokens"] += float(sum(mask))
                add_sums(metrics, sample_train_sums(datum.logprobs, new_lp.detach().cpu().tolist(), mask))
        return metrics

    def optim_step(self, params: AdamParams) -> dict[str, float]:
        torch = self._torch
        with self._lock:
            for group in self.optimizer.param_groups:
                group.update(lr=params.learning_rate, betas=(params.beta1, params.beta2), eps=params.eps,
                             weight_decay=params.weight_decay)
            max_norm = params.grad_clip_norm if params.grad_clip_norm > 0 else float("inf")
            grads = [p for p in self._params if p.grad is not None]
            grad_norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm)) if grads else 0.0
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return {"grad_norm": grad_norm}

    # ------------------------------------------------------------ checkpoints

    def trainable_state(self) -> dict[str, Any]:
        return {name: p.detach().cpu().clone() for name, p in self.model.named_parameters() if p.requires_grad}

    def save_state(self, name: str, directory: str, final: bool = False) -> CheckpointPaths:
        torch = self._torch
        folder = Path(directory) / name
        folder.mkdir(parents=True, exist_ok=True)
        with self._lock:
            weights = self.trainable_state()
            state = {"model": self.model_name, "weights": weights, "optimizer": self.optimizer.state_dict()}
            _atomic_torch_save(torch, state, folder / "state.pt")
            _atomic_torch_save(torch, {"model": self.model_name, "weights": weights}, folder / "sampler.pt")
        return CheckpointPaths(state_path=str(folder / "state.pt"), sampler_path=str(folder / "sampler.pt"))

    def load_state(self, state_path: str, with_optimizer: bool = True) -> None:
        torch = self._torch
        if not os.path.exists(state_path):
            raise KrlError(f"checkpoint {state_path} is missing; the run folder was moved or cleaned. "
                           "Start a new run or fork from another checkpoint.")
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        if state.get("model") != self.model_name:
            raise KrlError(f"checkpoint {state_path} is for model '{state.get('model')}', not '{self.model_name}'.")
        with self._lock, torch.no_grad():
            params = dict(self.model.named_parameters())
            for key, value in state["weights"].items():
                params[key].copy_(value.to(params[key].device))
            if with_optimizer and "optimizer" in state:
                self.optimizer.load_state_dict(state["optimizer"])

    def close(self) -> None:
        return None


def _atomic_torch_save(torch, obj: Any, path: Path) -> None:
    # A kill mid-write must never leave a half checkpoint under the final name.
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
