"""The quickstart walkthrough's labels (docs/curation.md, Walkthrough): one reviewer's
decisions (s56-agent, an AI agent, not a lawyer), taken by reading each memo bullet against the
criterion's PASS/FAIL wording, the grader's reason and the gold clause (blind mode: the gold
clause opens after the label; the decision here was written before the page was driven).

A criterion is PASS when a bullet that names that provision cites the criterion's document and
quotes or closely paraphrases the clause (the gold span or the same clause), FAIL otherwise (a
quote of the clause under another provision's name is FAIL: the memo does not identify it).
An episode is kept when its memo has no model chatter or prompt echo ("Certainly! Here is...",
"Copy word for word the sentence above") and at most two of its bullets quote a clause other
than the provision they name; rejected otherwise.

The first 6 criteria of each episode are labelled (the rooms have 7 to 15).

The episodes: ``bash scripts/quickstart.sh --seed 1`` on a fresh clone of 5b14751
(2026-12-06 17:35-18:35 UTC, workspace experiments/quickstart-seed1), in the Review page's
Random queue (seed 0): the one episode with a memo of eval-base (1 of 8), the first 13 of
r1-train's 15 memo episodes (of 16) and every memo episode of r1-eval-tuned (6 of 8): 20.

Episode rule, applied as the earlier reviewer wrote it: every r1-train memo pastes the sub
model's chatter ("Sure, here is the sentence with ...", "Copy word for word the sentence
above") into its bullets, so every one is rejected, whatever its criteria.

A finding of these labels: a bullet whose first line is chatter or a section heading and
whose quote follows in the next, unindented paragraph ("... is:\n\n\"Detto shall not assign
...\"", "1. GRANT OF RIGHTS\n\n1.1 LICENSE. ...") is read by the reference grader ``ref-v4``
without that paragraph, so it FAILs a criterion the quote meets. ``ref-v5`` reads the
paragraph after a bullet ending in a colon with the bullet (docs/judge.md)."""

REVIEWER = "s56-agent"

CHAT = "sub-model chatter pasted into the memo ('Sure, here is...', 'Certainly!')"
ECHO = "the prompt echoed ('copy word for word the sentence above')"
NEXT = "quote in the paragraph after the bullet's first line (the grader reads the bullet alone)"
HEAD = "quote in the paragraph after a section heading on the bullet's first line"

# the criterion notes shared by memos of one room that quote the same passages
BNL = {
    0: (["other"], "the insolvency clause ('assignment for the benefit of ... creditors')"),
    2: (["other"], "the indemnity (section 8) quoted as the liability cap"),
}
PIVX = {
    0: ([], NEXT + "; 'shall not' for the contract's 'may not'"),
    1: ([], HEAD + "; clause 1.1 word for word"),
    3: (["other"], "the product indemnity (4.2) as the liability cap"),
}

# episode id prefix -> (verdict letters in criterion order, {index: (tags, note)},
#                       episode verdict, episode tags, episode note)
D = {
    # eval-base (the base root, plain prompt, held-out rooms)
    "d9df293a": (
        "FFFFFF",
        {},
        "r",
        ["missed document"],
        "the memo is a Python dict of one generic sentence per provision "
        "('The contract may require parties to assign certain rights to others.'): "
        "no document cited, no clause quoted",
    ),
    # r1-train (the training collection, worked example on)
    "e3ce9bd8": (
        "FFFPFF",
        BNL,
        "r",
        ["other"],
        f"{CHAT}; {ECHO}; contract text pasted under change of control and termination",
    ),
    "c5e03d53": (
        "FPPFFF",
        {
            0: (["other"], "the indemnity (12.A) quoted as the anti-assignment clause"),
            3: (["wrong amount"], "'a minimum of [insert number of impressions]': a placeholder"),
        },
        "r",
        ["wrong amount"],
        f"{CHAT}; {ECHO}; the indemnity as anti-assignment",
    ),
    "c509b8d0": (
        "FPPFFF",
        {
            0: (["other"], "the indemnity (12.A) quoted as the anti-assignment clause"),
            3: (["wrong amount"], "'a minimum of 100 advertising impressions': 100 is invented"),
        },
        "r",
        ["wrong amount"],
        f"{CHAT}; {ECHO}; an invented minimum of 100 impressions",
    ),
    "f6773c3d": (
        "FFFPFF",
        BNL,
        "r",
        ["other"],
        f"{CHAT}; {ECHO}; the same memo as e3ce9bd8 (same room)",
    ),
    "f9462ac6": (
        "PPFFPF",
        PIVX,
        "r",
        ["other"],
        f"{CHAT}; {ECHO}; the product indemnity as the liability cap",
    ),
    "42da9b52": (
        "FFFPFF",
        BNL,
        "r",
        ["other"],
        f"{CHAT}; {ECHO}; the insolvency clause as anti-assignment",
    ),
    "34c1e2ca": (
        "PFFFPF",
        {
            1: (
                ["other"],
                "'The liability cap in this paragraph reflects the allocation of risk': no cap",
            ),
            2: (["other"], "the governing-law clause as termination for convenience"),
        },
        "r",
        ["other"],
        f"{CHAT}; governing law as termination for convenience",
    ),
    "5be8f7f8": (
        "PPFFPF",
        PIVX,
        "r",
        ["other"],
        f"{CHAT}; the product indemnity as the liability cap",
    ),
    "13c7347d": (
        "PPFFPF",
        PIVX,
        "r",
        ["other"],
        f"{CHAT}; trademark goodwill as change of control, the indemnity as the liability cap",
    ),
    "b696d4e9": (
        "PFFFPF",
        {2: (["other"], "the governing-law clause as termination rights")},
        "r",
        ["other"],
        f"{ECHO}; governing law as termination for convenience",
    ),
    "550c0861": (
        "PFFFPF",
        {
            1: (
                ["other"],
                "'The liability cap in this paragraph reflects the allocation of risk': no cap",
            ),
            2: (["other"], "the governing-law clause as termination for convenience"),
        },
        "r",
        ["other"],
        f"{CHAT}; {ECHO}; governing law as termination for convenience",
    ),
    "ddc7d769": (
        "FPPFFF",
        {
            0: (["other"], "the indemnity (12.A) quoted as the anti-assignment clause"),
            3: (["wrong amount"], "'a minimum of 100 advertising impressions': 100 is invented"),
        },
        "r",
        ["wrong amount"],
        f"{CHAT}; {ECHO}; an invented minimum of 100 impressions",
    ),
    "8c24a4fa": (
        "PPFFPF",
        PIVX,
        "r",
        ["other"],
        f"{CHAT}; the product indemnity as the liability cap",
    ),
    # r1-eval-tuned (the tuned root, plain prompt, held-out rooms)
    "28c965a1": (
        "FFFPFF",
        {
            1: (
                ["invented clause"],
                "a textbook definition of anti-assignment, not the contract's clause",
            ),
            2: (
                ["other"],
                "'All of the Transferred Patents are owned solely by SONY', not the assignment",
            ),
            5: (["other"], "the agreement's title and recitals as the exclusivity clause"),
        },
        "r",
        ["invented clause"],
        f"{CHAT}; {ECHO}; IP-ownership text quoted as anti-assignment",
    ),
    "cb54433b": (
        "FFFFFF",
        {
            2: (["other"], "a 14-word fragment of the clause's opening, the cap itself not stated"),
            3: (["other"], "'K, 12/6/2017' as the minimum commitment"),
        },
        "r",
        ["other"],
        "one excerpt (the insolvency termination) pasted as some 60 'Excerpt of contract' bullets; "
        "governing law as anti-assignment",
    ),
    "7d928730": (
        "PFFFFF",
        {
            0: ([], NEXT + "; section 22.11 named and quoted, its consent exception dropped"),
        },
        "r",
        ["invented clause"],
        f"{CHAT} ('Sure, here's the sentence with anti-assignment added'); one finding only",
    ),
    "296b5d38": (
        "PFFFFF",
        {
            0: ([], NEXT + "; section 22.11 named and quoted"),
            1: (["other"], "the no-hire sentence (20.1) of the Non-Competition section"),
        },
        "r",
        ["other"],
        "four bullets quote a clause other than the provision they name (no-hire, inventory "
        "liability, purchase orders, stock reimbursement)",
    ),
    "7d4c8b56": (
        "FFFPPF",
        {
            0: (["invented clause"], "an invented change of control to Intel Corporation"),
            1: (
                ["invented clause"],
                "'allows Sony to assign its rights ... without any restrictions'",
            ),
        },
        "r",
        ["invented clause"],
        f"{CHAT}; an invented Intel change of control; the definition of 'IP Agreement' as IP ownership",
    ),
    "4ea37101": (
        "PFFFPP",
        {
            0: ([], "quote in the bullet's second paragraph, after a first line ending in '.'"),
            1: (["other"], "a termination right as anti-assignment"),
            5: ([], "word for word but 'Franchisee' for the contract's 'Franchisor' at the end"),
        },
        "r",
        ["other"],
        "every finding followed by the same Next steps, References and '# COPYRIGHT All rights "
        "reserved.' block; 'the Franchisee hereby grants to Franchisee'",
    ),
}

ORDER = {
    "eval-base": ["d9df293a"],
    "r1-train": [
        "e3ce9bd8", "c5e03d53", "c509b8d0", "f6773c3d", "f9462ac6", "42da9b52",
        "34c1e2ca", "5be8f7f8", "13c7347d", "b696d4e9", "550c0861", "ddc7d769", "8c24a4fa",
    ],
    "r1-eval-tuned": ["28c965a1", "cb54433b", "7d928730", "296b5d38", "7d4c8b56", "4ea37101"],
}  # fmt: skip
"""run -> the labelled episodes, the first of its Random queue (seed 0)."""

CARD = {"r1-train": (4, 0)}
"""run -> (queue position, criterion index) of the card the driver screenshots: a criterion
the grader failed and the reviewer passed."""

T = {run: [(p, *D[p]) for p in eps] for run, eps in ORDER.items()}
"""run -> episodes in queue order: (prefix, letters, criterion tags, verdict, tags, note)."""
