"""The root's prompts, versioned in the package: system prompt, worked example, task message.

``PROMPT_VERSION`` is recorded in every episode; change it whenever any text here changes so
that episodes collected under different prompts are never mixed silently. The worked example
(few-shot turns) is a per-model setting: small roots (Qwen2.5-Coder 0.5B/1.5B) only act as an
RLM root when shown one (the entry's measured ``notes`` in ``models/registry.py``: 0.5B gives 0/20 good first turns without it,
14/20 with it and a ``` ```repl ``` prefill). The example room is fictional and shares no text
with any real room.
"""

from __future__ import annotations

from rlmdistill.models.base import Message

PROMPT_VERSION = "rlm-dd-v4"

SYSTEM_PROMPT = """\
You are the lead reviewer in an M&A due-diligence team. A data room of documents is loaded \
in a Python REPL. You cannot read the room directly: you explore it by writing Python code in \
a ```repl block, and you delegate reading to sub-models.

REPL API (state persists between blocks):
- list_documents(folder=None) -> list of {"id", "folder", "chars"}
- read(doc_id, start=0, end=None) -> str: characters of one document
- search(pattern, doc_id=None, window=300, max_hits=10) -> list of {"doc_id", "start", "end", "text"}: \
case-insensitive regex hits with `window` characters of context
- llm_query(prompt) -> str: ask a sub-model about text you pass in the prompt (it sees nothing else)
- llm_query_batched(prompts) -> list[str]: many sub-model calls in parallel; use this to read many documents
- room: dict doc_id -> full text (large; pass slices to sub-models, do not print it)
- FINAL_VAR(memo): hand back the final memo held in the variable `memo`; FINAL(text) hands back text

Rules:
- Reply with exactly one ```repl code block per turn. Printed output is shown to you, truncated if long.
- Read the whole room through sub-models: every document should reach a sub-model.
- The memo must cite documents by their id, state each material finding (change of control, \
assignment, exclusivity, non-compete, termination, liability, minimum commitments, ...), \
quantify exposure where the documents give amounts, and end with next steps.
- When the memo is complete, call FINAL_VAR(memo) in your code."""

_EXAMPLE_TASK = """\
Task: Red-flag review of the target's contracts.
Write a due-diligence memo that lists the material findings, cites the documents that support each one \
by id, quantifies exposure where possible and recommends next steps.

Data room: 3 documents, 12,480 characters, folders: Supply (2), Leases (1).
Documents:
- Supply/acme_supply.txt (5,120 chars)
- Supply/beta_components.txt (4,010 chars)
- Leases/hq_lease.txt (3,350 chars)"""

_EXAMPLE_TURN_1 = """\
```repl
docs = list_documents()
for d in docs:
    print(d["id"], d["chars"])
print(len(docs), "documents")
```"""

_EXAMPLE_OBS_1 = """\
REPL output (block 0):
```
Supply/acme_supply.txt 5120
Supply/beta_components.txt 4010
Leases/hq_lease.txt 3350
3 documents
```"""

_EXAMPLE_TURN_2 = r"""```repl
docs = list_documents()
TOPICS = {
    "change of control": "change of control|change in control|merger|acqui",
    "anti-assignment": "assign",
    "exclusivity": "exclusiv",
    "non-compete": "compet",
    "termination for convenience": "convenience|without cause|for any reason",
    "liability cap": "limitation of liability|liabilit",
    "minimum commitment": "minimum",
}
jobs = []
for d in docs:
    for topic, pattern in TOPICS.items():
        hits = search(pattern, doc_id=d["id"], window=250, max_hits=2)
        if hits:
            excerpt = "\n...\n".join(h["text"] for h in hits)
            prompt = ("Excerpt of contract " + d["id"] + ":\n" + excerpt + "\n\n"
                      "Copy word for word the sentence above about " + topic + ".")
            jobs.append((d["id"], topic, prompt))
print(len(jobs), "sub-calls")
answers = llm_query_batched([p for _, _, p in jobs])
memo = "# Due-diligence memo\n\n## Findings\n"
for (doc_id, topic, _), answer in zip(jobs, answers):
    memo += "\n- " + topic + " (" + doc_id + "): " + answer.strip() + "\n"
memo += "\n## Next steps\n\n- Seek consents where change of control or assignment needs them.\n"
memo += "- Quantify the exposure of each finding with the seller.\n"
print(memo[:1000])
FINAL_VAR(memo)
```"""

_EXAMPLE_OBS_2 = """\
REPL output (block 0):
```
9 sub-calls
# Due-diligence memo

## Findings

- change of control (Supply/acme_supply.txt): "Any change of control of Buyer shall entitle \
Acme to terminate this Agreement on 30 days' notice."

- anti-assignment (Supply/acme_supply.txt): "Neither party may assign this Agreement without \
the prior written consent of the other party."
...
```
Final memo received."""


def worked_example() -> list[Message]:
    """The few-shot turns (user, assistant, user, assistant, user, assistant-free ending).

    Shape: 5 messages alternating user/assistant/user/assistant/user starting with the
    example task; they precede the real task message and are never supervised in SFT.
    """
    return [
        Message(role="user", content=_EXAMPLE_TASK),
        Message(role="assistant", content=_EXAMPLE_TURN_1),
        Message(role="user", content=_EXAMPLE_OBS_1),
        Message(role="assistant", content=_EXAMPLE_TURN_2),
        Message(role="user", content=_EXAMPLE_OBS_2),
    ]


def task_message(
    instructions: str,
    title: str,
    n_documents: int,
    n_chars: int,
    folders: dict[str, int],
    documents: list[tuple[str, int]],
    max_listed: int = 40,
) -> str:
    """The first real user message: the task and an overview of the room.

    ``documents`` is ``[(doc_id, chars)]``; at most ``max_listed`` are listed (the root is
    told how many are not) so the message stays bounded for rooms of thousands of documents.
    """
    folder_text = ", ".join(f"{k or '(top level)'} ({v})" for k, v in sorted(folders.items()))
    lines = [
        f"Task: {title}",
        instructions.strip(),
        "",
        f"Data room: {n_documents} documents, {n_chars:,} characters, folders: {folder_text}.",
        "Documents:",
    ]
    lines += [f"- {doc_id} ({chars:,} chars)" for doc_id, chars in documents[:max_listed]]
    if len(documents) > max_listed:
        lines.append(f"- ... and {len(documents) - max_listed} more (use list_documents())")
    return "\n".join(lines)


def observation_message(parts: list[str]) -> str:
    """Join per-block observations into the user message the root sees next."""
    return "\n\n".join(parts)


def no_action_message() -> str:
    """Told to the root after a reply with neither a code block nor a final answer (R2)."""
    return (
        "Your reply had no ```repl code block and no final answer. Write a ```repl block, "
        "or call FINAL_VAR(memo) once the memo is complete."
    )


SUBAGENT_PROMPT_VERSION = "rlm-dd-sub-v1"
"""Version of the depth-2 subagent prompt; part of the episode id when ``depth == 2``."""

SUBAGENT_SYSTEM_PROMPT = """\
You are a sub-agent of a due-diligence reviewer. The request you were given, with the text it \
concerns, is in the Python REPL variable `context` (a str). Work in ```repl code blocks; printed \
output is shown to you, truncated if long.

REPL API: context (str); search(pattern, window=300, max_hits=10) -> list of {"start", "end", \
"text"} hits in context; llm_query(prompt) -> str and llm_query_batched(prompts) -> list[str] \
ask a plain model about text you pass (use them for long contexts); FINAL(answer) hands back \
your answer as text, FINAL_VAR(name) the value of a variable.

Answer the request precisely, quoting the text where it asks for quotes. Reply with one ```repl \
block per turn and call FINAL(...) as soon as you have the answer."""


def subagent_task_message(context: str, preview_chars: int = 600) -> str:
    """First user message of a subagent: size and a bounded preview of its ``context``."""
    preview = context[:preview_chars]
    more = (
        f"\n... [{len(context) - preview_chars:,} more characters in `context`]"
        if len(context) > preview_chars
        else ""
    )
    return f"`context` holds {len(context):,} characters. It begins:\n\n{preview}{more}"
