"""The walkthrough's labels (docs/curation.md, Walkthrough): one reviewer's decisions
(h4-agent), taken by reading each memo bullet against the criterion's wording, the grader's
reason and the gold clause (and, for a figure, the contract text)."""

# run -> list of (episode id prefix, verdict letters in criterion order, {index: (tags, note)},
#                 episode verdict, episode tags, episode note)
T = {
    "r2-train": [
        (
            "e3855c4f",
            "PPFFFFFFF",
            {
                2: (["other"], "quotes the indemnity clause, not the damages limit"),
                8: (["wrong amount"], "30% is not in the contract: Schedule 1 sets the percentage"),
            },
            "r",
            ["wrong amount"],
            "states a 30% threshold the contract does not contain",
        ),
        (
            "43d61df6",
            "PPFFFFFFF",
            {8: (["wrong amount"], "30% is not in the contract")},
            "r",
            ["wrong amount"],
            "invented 30% threshold",
        ),
        (
            "4278482a",
            "FFFFPFFFFPFFF",
            {
                2: (["invented clause"], "garbled indemnity text, no cap"),
                8: (
                    ["invented clause"],
                    "misstates the exclusion as 'any loss' and echoes the prompt",
                ),
            },
            "r",
            ["invented clause"],
            "two mislabelled clauses pass the grader",
        ),
        ("b3f717eb", "P", {}, "k", [], ""),
        ("09a83ffe", "P", {}, "k", [], ""),
        (
            "b9b644a2",
            "PFFFFFPFFFF",
            {
                2: (
                    ["invented clause", "wrong amount"],
                    "a $100,000 cap the contract does not contain",
                ),
                9: (
                    ["wrong document cited"],
                    "quotes the Apollo purchase-order clause under Bon-Ton",
                ),
            },
            "r",
            ["invented clause"],
            "invented liability cap",
        ),
        (
            "67720eb5",
            "FFFFPFFFFPFFF",
            {8: (["invented clause"], "misstates the exclusion as 'any loss'")},
            "r",
            ["invented clause"],
            "",
        ),
        ("c0ebb7c2", "PPFFPF", {}, "k", [], ""),
        (
            "682c8561",
            "FPFPFFFFFPFF",
            {
                0: (["other"], "a sub-reseller restriction, not the assignment clause"),
                4: (
                    ["invented clause"],
                    "'contact Diversinet for any reason' is not in the contract",
                ),
                5: (["other"], "names the AMC without saying what it is"),
            },
            "r",
            ["invented clause"],
            "invented termination-for-convenience text",
        ),
        (
            "5bb47066",
            "PFFFFFPFFFF",
            {},
            "r",
            ["other"],
            "prompt echo in the memo ('Certainly! Here is ...')",
        ),
    ],
    "r2-eval-tuned": [
        ("e3c4f96d", "FFPF", {}, "r", ["other"], "most bullets quote unrelated text"),
        ("52bab100", "FFFF", {}, "r", ["other"], "prompt echo instead of clauses"),
        ("ef6f7183", "FFFF", {}, "r", [], ""),
        ("32a167e7", "FFPF", {}, "r", [], ""),
        ("78fb33a1", "FFFF", {}, "r", [], ""),
        (
            "43e332f6",
            "FFFF",
            {1: (["invented clause"], "a generic definition, not the contract's clause")},
            "r",
            ["invented clause"],
            "",
        ),
        ("4893d377", "PPFP", {}, "k", [], ""),
        (
            "09cbc6da",
            "FFPF",
            {1: (["invented clause"], "payment obligation the amendment does not state")},
            "r",
            ["invented clause"],
            "",
        ),
        ("145c3200", "FFFF", {}, "r", [], ""),
        ("37a082c0", "FFFF", {}, "r", [], ""),
    ],
}
