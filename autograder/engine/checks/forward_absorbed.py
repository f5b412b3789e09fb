"""Check of ``MultiHeadLatentAttention.forward_absorbed``: the same cases and outputs as ``forward``, computed in
latent space (``kv_b_proj``'s key part folded into the query, its value part applied after the weighted sum
of latents)."""
from autograder.engine.checks import ATTENTION_BASICS
from autograder.engine.checks.multi_head_latent_attention import OUTPUT_NAMES, SHARED, _variant, cases
from autograder.engine.inputs import modules
from autograder.engine.model import Exercise, Mistake
from course.protocols import call_absorbed_decoder
from solutions.attention_basics import masked_softmax
from solutions.rope_mla import MultiHeadLatentAttention


def _absorbed_with(split_up):
    """``forward_absorbed`` with ``split_up(self) -> (up_k [H, nope, r], up_v [H, v, r])`` taken from kv_b_proj."""
    def forward_absorbed(self, x, attention_mask=None, cache=None):
        q_nope, q_rope, latent, k_rope, mask = self.prepare(x, attention_mask, cache)
        up_k, up_v = split_up(self)
        scores = (q_nope @ up_k @ latent[:, None].transpose(-2, -1)
                  + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
        mixed = masked_softmax(scores, mask) @ latent[:, None]
        return self.finish(mixed @ up_v.transpose(-2, -1)), cache
    return forward_absorbed


def _transposed(read):
    """kv_b_proj's weight read by ``read`` as if it were [in, out] (it is [out, in], as in every nn.Linear)."""
    def split_up(self):
        return read(self).split([self.nope, self.v_head_dim], dim=1)
    return split_up


_AS_IN_OUT = (  # three ways of reading [out, in] as [in, out], each giving [H, nope + v, r]
    lambda self: self.kv_b_proj.weight.t().reshape(self.num_heads, self.nope + self.v_head_dim, self.kv_lora_rank),
    lambda self: self.kv_b_proj.weight.view(self.kv_lora_rank, self.num_heads, self.nope + self.v_head_dim)
    .permute(1, 2, 0),
    lambda self: self.kv_b_proj.weight.view(self.num_heads, self.kv_lora_rank, self.nope + self.v_head_dim)
    .transpose(1, 2),
)


def _keys_then_values(self):
    """All heads' key rows first, then all value rows: not the per-head layout of kv_b_proj."""
    keys, values = self.kv_b_proj.weight.split([self.num_heads * self.nope, self.num_heads * self.v_head_dim])
    return (keys.unflatten(0, (self.num_heads, self.nope)), values.unflatten(0, (self.num_heads, self.v_head_dim)))


def _value_rows_as_keys(self):
    """Each head's rows taken from the wrong end: the last ``nope`` rows as the key part, the first ``v`` as values."""
    up = self.kv_b_proj.weight.unflatten(0, (self.num_heads, self.nope + self.v_head_dim))
    return up[:, -self.nope:], up[:, :self.v_head_dim]


_LAYOUT = ("kv_b_proj.weight 是 [H·(nope + v), kv_lora_rank]：unflatten 成 [H, nope + v, r]，每个头前 nope 行是 W_uk、"
           "后 v 行是 W_uv；吸收后 q_latent = q_nope @ W_uk（[B, H, T, r]），最后 (权重 @ latent) @ W_uvᵀ。")

MISTAKES = SHARED + (
    *(Mistake("吸收矩阵转置了", "nn.Linear 的 weight 是 [输出, 输入]，不用转置。" + _LAYOUT,
              _variant(forward_absorbed=_absorbed_with(_transposed(read)))) for read in _AS_IN_OUT),
    *(Mistake("吸收矩阵切错了", _LAYOUT, _variant(forward_absorbed=_absorbed_with(split)))
      for split in (_keys_then_values, _value_rows_as_keys)),
)

EXERCISE = Exercise("forward_absorbed", 4, MultiHeadLatentAttention, cases, MISTAKES, output_names=OUTPUT_NAMES,
                    call=call_absorbed_decoder, defines="MultiHeadLatentAttention",
                    free=lambda case: modules.padding_query_rows(case.kwargs.get("attention_mask")),
                    uses=("rope_cos_sin", "apply_rope", "LatentKVCache", "split_heads", "merge_heads", *ATTENTION_BASICS))
