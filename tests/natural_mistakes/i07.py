"""07_real_model: beam_search, written from the notebook alone.

Conventions assumed (from the notebook's "beam search：同时留几条路" section and 练习 7): ``next_log_probs(ids)`` takes an
int64 ``ids [N, L]`` (N equally long sequences) and returns ``[N, V]`` log-probabilities of each sequence's next token;
``input_ids [T]`` is one prompt. The first step calls the model on the prompt alone (``input_ids[None]``, one beam of
score 0) and keeps its ``num_beams`` best tokens; every later step scores each of the ``num_beams × V`` candidates as
its parent's score plus the log-probability of the token, keeps the ``num_beams`` best over all beams together, and
rebuilds each kept beam as its parent's history (indexed by the parent, ``i // V``) plus the new token (``i % V``).
The model is always given the whole sequence (prompt and new tokens so far). No end token: every beam gets exactly
``max_new_tokens >= 1`` new tokens. The result is ``(tokens [num_beams, max_new_tokens] int64, scores [num_beams])``:
the new tokens only (no prompt), and each beam's sum of log-probabilities of its new tokens (not normalised by
length), in the dtype of next_log_probs' output, best beam first (scores in descending order). ``num_beams <= V`` and
the inputs are never modified. Ties between equal scores are assumed absent (the order among equal candidates is not
specified). The correct beam_search is kept in a07
(``BEAM_SEARCH``), so that every 07 writer's CORRECT has it; every other graded definition of 07 is h07's CORRECT, unchanged; each entry here lists only
``beam_search``, which no other graded definition calls.
"""
from . import a07, h07
from .entry import Entry, patch

ASSIGNMENT = "07_real_model"
HEADER = h07.HEADER

BEAM = a07.BEAM_SEARCH

# A second correct version, in the other common style: the first step is written out before the loop.
SPLIT = '''def beam_search(next_log_probs, input_ids, num_beams, max_new_tokens):
    """Beam search without an end token; returns (tokens [num_beams, max_new_tokens] int64, scores [num_beams])."""
    first = next_log_probs(input_ids[None])[0]           # [V]: the prompt alone
    scores, token = first.topk(num_beams)
    beams = torch.cat([input_ids.expand(num_beams, -1), token[:, None]], dim=-1)
    for _ in range(max_new_tokens - 1):
        log_probs = next_log_probs(beams)                # [num_beams, V]
        vocab = log_probs.shape[-1]
        scores, flat = (scores[:, None] + log_probs).flatten().topk(num_beams)
        beams = torch.cat([beams[flat // vocab], (flat % vocab)[:, None]], dim=-1)
    return beams[:, len(input_ids):], scores
'''

CORRECT = {**h07.CORRECT, "beam_search": BEAM}

EX = ("beam_search",)

# Reusable edits of BEAM.
_FIRST_BEAM = ("    beams = input_ids[None]                              # [1, T]: the first step expands the prompt alone\n",
               "    beams = input_ids.repeat(num_beams, 1)               # [num_beams, T]: one copy per beam\n")
_RETURN = "    return beams[:, input_ids.shape[0]:], scores\n"
_RETURN_PROMPT = (_RETURN, "    return beams, scores\n")
_ACCUMULATE = "            candidates = scores[:, None] + log_probs     # [num_beams, V]\n"
_CANDIDATES = ("        if step == 0:\n"
               "            candidates = log_probs                       # one beam, score 0\n"
               "        else:\n" + _ACCUMULATE)
_TOPK = "        scores, flat = candidates.flatten().topk(num_beams)\n"
_SPLITS = "        parent, token = flat // vocab, flat % vocab\n"
_CAT = "        beams = torch.cat([beams[parent], token[:, None]], dim=-1)\n"

# Reusable edits of SPLIT.
_SPLIT_LOOP = ("    for _ in range(max_new_tokens - 1):\n", "    for _ in range(max_new_tokens):\n")
_SPLIT_CAT = "        beams = torch.cat([beams[flat // vocab], (flat % vocab)[:, None]], dim=-1)\n"
_SPLIT_NO_REORDER = (_SPLIT_CAT, "        beams = torch.cat([beams, (flat % vocab)[:, None]], dim=-1)\n")

ENTRIES = [
    # ---------------- single mistakes ----------------
    Entry("i07-beam-first-step-repeated-prompt", "single",
          "The first step starts from num_beams copies of the prompt (input_ids.repeat(num_beams, 1)) instead of the "
          "prompt alone, so the num_beams best of the first step's num_beams × V candidates are all the same best "
          "token: every beam is identical (duplicates) whenever num_beams > 1, and the second-best first tokens are "
          "never explored.",
          {"beam_search": patch(BEAM, _FIRST_BEAM)}, EX),
    Entry("i07-beam-scores-not-accumulated", "single",
          "The beam's running score is never added: each step ranks the candidates by log p(t | beam) of the new "
          "token alone (candidates = log_probs) instead of score(beam) + log p(t | beam), so the beams are chosen by "
          "their last token only and the returned scores are the last step's log-probabilities, not the sums over "
          "all new tokens.",
          {"beam_search": patch(BEAM, (_ACCUMULATE, "            candidates = log_probs                       # [num_beams, V]\n"))},
          EX),
    Entry("i07-beam-history-not-reordered", "single",
          "After the first step the kept candidates' histories are not taken from their parent beams: the new token "
          "is appended to row k of the old beams (torch.cat([beams, token])) instead of to beams[parent], so whenever "
          "a kept candidate's parent is not the beam in the same row (e.g. two survivors come from one beam) the "
          "returned token sequences are spliced from different beams and do not match their scores (and when the "
          "model looks further back than the last token, later steps are scored on the wrong histories).",
          {"beam_search": patch(SPLIT, _SPLIT_NO_REORDER)}, EX),
    Entry("i07-beam-scores-not-reordered", "single",
          "The new scores are computed as scores + log_probs[parent, token], adding the new token's log-probability "
          "to the score of the beam in the same row instead of to its parent's score (scores[parent]); whenever a "
          "kept candidate's parent is in another row the running scores are mixed between beams, so later steps "
          "rank with wrong scores and the returned scores (and order) are wrong.",
          {"beam_search": patch(BEAM,
                                (_CANDIDATES, "        if step == 0:\n"
                                              "            scores = log_probs.new_zeros(1)              # the prompt alone\n"
                                              "        candidates = scores[:, None] + log_probs         # [n, V]\n"),
                                (_TOPK, "        flat = candidates.flatten().topk(num_beams).indices\n"),
                                (_SPLITS, _SPLITS + "        scores = scores + log_probs[parent, token]\n"))},
          EX),
    Entry("i07-beam-returns-prompt", "single",
          "The whole sequences are returned, prompt included (beams, shape [num_beams, T + max_new_tokens]), instead "
          "of only the new tokens beams[:, T:] ([num_beams, max_new_tokens]).",
          {"beam_search": patch(BEAM, _RETURN_PROMPT)}, EX),
    Entry("i07-beam-multiplies-log-probs", "single",
          "The candidate score is the parent's score times the token's log-probability (scores[:, None] * log_probs), "
          "as if they were probabilities, instead of their sum: the product of two negative log-probabilities is "
          "positive, so from the second step on the ranking favours unlikely tokens and the returned scores are not "
          "sums of log-probabilities.",
          {"beam_search": patch(BEAM, (_ACCUMULATE, "            candidates = scores[:, None] * log_probs     # [num_beams, V]\n"))},
          EX),
    Entry("i07-beam-greedy-per-beam", "single",
          "After the first step each beam is extended only by its own best token (log_probs.max(dim=-1) per row) "
          "instead of keeping the num_beams best of all num_beams × V candidates: this is num_beams independent greedy "
          "continuations of the first step's best tokens, so a beam with two good continuations cannot keep both, "
          "and the result is not re-sorted best first.",
          {"beam_search": patch(SPLIT, (
              "        vocab = log_probs.shape[-1]\n"
              "        scores, flat = (scores[:, None] + log_probs).flatten().topk(num_beams)\n" + _SPLIT_CAT,
              "        best, token = log_probs.max(dim=-1)\n"
              "        scores = scores + best\n"
              "        beams = torch.cat([beams, token[:, None]], dim=-1)\n"))}, EX),
    Entry("i07-beam-ascending-order", "single",
          "The candidates are ranked with argsort() (ascending) and the last num_beams indices are kept: the right "
          "beams are kept, but in ascending order of score, so the returned beams are worst first instead of best "
          "first (row 0 is the lowest-scoring beam whenever num_beams > 1).",
          {"beam_search": patch(BEAM, (_TOPK, "        flat = candidates.flatten().argsort()[-num_beams:]\n"
                                              "        scores = candidates.flatten()[flat]\n"))}, EX),
    Entry("i07-beam-one-step-too-many", "single",
          "The first step is written out before the loop, but the loop still runs max_new_tokens times instead of "
          "max_new_tokens - 1, so every beam gets max_new_tokens + 1 new tokens (tokens is [num_beams, "
          "max_new_tokens + 1]) and the scores include the extra token's log-probability.",
          {"beam_search": patch(SPLIT, _SPLIT_LOOP)}, EX),
    Entry("i07-beam-scores-float32-init", "single",
          "The running scores start as torch.zeros(1) (float32) and the first step adds it to the model's "
          "log-probabilities, so for float16/bfloat16 log-probabilities the scores are promoted to float32: the "
          "returned scores' dtype is not that of next_log_probs' output (the tokens and values are right).",
          {"beam_search": patch(BEAM, (_CANDIDATES, "        candidates = scores[:, None] + log_probs         # [n, V]\n"),
                                ("    for step in range(max_new_tokens):\n",
                                 "    scores = torch.zeros(1)                              # the prompt's score\n"
                                 "    for step in range(max_new_tokens):\n"))}, EX),
    Entry("i07-beam-model-sees-last-token-only", "single",
          "The model is called on each beam's last token only (next_log_probs(beams[:, -1:])) instead of the whole "
          "sequence (prompt and new tokens so far), so the next-token log-probabilities ignore every earlier token: "
          "wrong whenever the model's next token depends on more than the last one.",
          {"beam_search": patch(BEAM, ("        log_probs = next_log_probs(beams)                # [n, V]\n",
                                       "        log_probs = next_log_probs(beams[:, -1:])        # [n, V]\n"))}, EX),
    # ---------------- raises ----------------
    Entry("i07-beam-true-division-parent", "raises",
          "The parent beam is computed with true division (flat / V), a float tensor, instead of floor division "
          "(flat // V); indexing beams with it raises an IndexError (tensors used as indices must be long, int, "
          "byte or bool) on every input.",
          {"beam_search": patch(BEAM, (_SPLITS, "        parent, token = flat / vocab, flat % vocab\n"))}, EX),
    Entry("i07-beam-parent-token-swapped", "raises",
          "The flat candidate index i is decoded the wrong way round: the parent beam is taken as i % V and the token "
          "as i // V (instead of parent i // V, token i % V). At the first step there is one beam and i < V, so the "
          "parent i % V is the token itself: indexing the single prompt row with it raises an IndexError unless every "
          "kept first token is token 0 (possible only with num_beams = 1, which runs, and happens to be right, only while "
          "every chosen token is 0).",
          {"beam_search": patch(BEAM, (_SPLITS, "        parent, token = flat % vocab, flat // vocab\n"))}, EX),
    Entry("i07-beam-cat-without-parent", "raises",
          "The new tokens are appended to the old beams (torch.cat([beams, token[:, None]])) instead of to "
          "beams[parent]; after the first step beams is still the single prompt row [1, T] while token is "
          "[num_beams, 1], so torch.cat raises a size-mismatch RuntimeError whenever num_beams > 1 (num_beams = 1 "
          "happens to work, since the parent is always row 0).",
          {"beam_search": patch(BEAM, (_CAT, "        beams = torch.cat([beams, token[:, None]], dim=-1)\n"))}, EX),
    # ---------------- doubles ----------------
    Entry("i07-beam-repeated-prompt-and-returns-prompt", "double",
          "Two mistakes: the first step starts from num_beams copies of the prompt instead of the prompt alone, so "
          "all beams pick the same best first token and are identical (num_beams > 1); and the whole sequences are "
          "returned with the prompt ([num_beams, T + max_new_tokens]) instead of only the new tokens.",
          {"beam_search": patch(BEAM, _FIRST_BEAM, _RETURN_PROMPT)}, EX),
    Entry("i07-beam-no-reorder-and-one-step-too-many", "double",
          "Two mistakes: the new token is appended to the beam in the same row instead of to its parent beam "
          "(beams is not indexed by i // V), so the token sequences are spliced from different beams whenever a "
          "kept candidate's parent is in another row; and after writing out the first step the loop still runs "
          "max_new_tokens times, so every beam gets max_new_tokens + 1 new tokens.",
          {"beam_search": patch(SPLIT, _SPLIT_NO_REORDER, _SPLIT_LOOP)}, EX),
]
