"""The quickstart walkthrough's labels (docs/curation.md, Walkthrough): one reviewer's
decisions (h7-agent, an AI agent, not a lawyer), taken by reading each memo bullet against the
criterion's PASS/FAIL wording, the grader's reason and the gold clause (blind mode: the gold
clause opens after the label; the decision here was written before the page was driven).

A criterion is PASS when a bullet that names that provision cites the criterion's document and
quotes or closely paraphrases the clause (the gold span or the same clause), FAIL otherwise (a
quote of the clause under another provision's name is FAIL: the memo does not identify it).
An episode is kept when its memo has no model chatter or prompt echo ("Certainly! Here is...",
"Copy word for word the sentence above") and at most two of its bullets quote a clause other
than the provision they name; rejected otherwise.

The first 6 criteria of each episode are labelled (the rooms have 8 to 12).

The eval-base episodes have no memo: the Review page does not queue them, so their
keep/reject labels are in eval-base.labels.csv (``rlmdistill labels import``)."""

REVIEWER = "h7-agent"

ST = "Marketing_Endorsement/steelvaultcorp (affiliate agreement)"
SP = "Services/sparklingspringwater (software licence)"

# episode id prefix -> (verdict letters in criterion order, {index: (tags, note)},
#                       episode verdict, episode tags, episode note)
D = {
    "2aca732f": (
        "PPFFPF",
        {0: ([], "quotes clause (c) exactly, in the bullet's indented second paragraph")},
        "r",
        ["other"],
        "mislabelled bullets: an independent-contractor clause as exclusivity, model chatter "
        "('Certainly! Here is...') and a warranty clause as termination for convenience",
    ),
    "e863ebf6": (
        "PFFFPF",
        {
            0: ([], "quotes clause (c) exactly, in the bullet's indented second paragraph"),
            1: (["other"], "the damages clause is quoted under 'revenue sharing'"),
        },
        "r",
        ["other"],
        "mislabelled bullets: a for-cause termination as termination for convenience (with "
        "'Certainly!' chatter), the site-inspection right as IP ownership, the damages "
        "exclusion as revenue sharing",
    ),
    "daf1aea8": (
        "FFFPFF",
        {
            0: (
                ["other"],
                "the bullet quotes the insolvency clause ('assignment for the benefit of creditors')",
            ),
            2: (["other"], "the 'liability cap' bullet quotes the indemnity clause"),
        },
        "r",
        ["other"],
        "chatter and prompt echo ('Sure, here is...', 'Copy word for word the sentence above'); "
        "an arbitrator clause as non-compete, the indemnity as liability cap",
    ),
    "17e9bfef": (
        "FFFPFF",
        {},
        "r",
        ["other"],
        "the same memo as daf1aea8 nearly word for word: chatter, prompt echo, mislabelled bullets",
    ),
    "f1021dbc": (
        "FFFPFF",
        {},
        "r",
        ["other"],
        "the same memo as daf1aea8 nearly word for word: chatter, prompt echo, mislabelled bullets",
    ),
    "283a33d3": (
        "PFFFPF",
        {
            0: ([], "quotes clause (c) exactly, in the bullet's indented second paragraph"),
            2: ([], "the 90-day notice sentence is cut out by the '...' of the sub-call output"),
        },
        "k",
        [],
        "no chatter; 2 of 9 bullets mislabelled (independent contractors as exclusivity, the "
        "project manager as non-compete)",
    ),
    "05213522": (
        "FFPPFF",
        {1: ([], "the cap's carve-out is quoted under 'liability cap', not named as uncapped")},
        "r",
        ["other"],
        "chatter and prompt echo as in daf1aea8; here the liability cap bullet is right",
    ),
}

# the first 16 of the Random queue (seed 0) of r1-train
ORDER: list[str] = []

CARD = {"r1-train": (0, 0)}
"""run -> (queue position, criterion index) of the card the driver screenshots."""

T = {"r1-train": [(p, *D[p]) for p in ORDER], "eval-base": []}
"""run -> episodes in queue order: (prefix, letters, criterion tags, verdict, tags, note)."""
