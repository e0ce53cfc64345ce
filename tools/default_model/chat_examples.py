"""Synthesized chat turns for loom's default model.

The corpus has no dialogues, so short question/answer turns are built from
its structured sources (dictionary glosses, jargon entries, verses, speeches,
chapters, fortunes) with fixed phrasings. They teach the ChatML turn format
and when to stop (<|im_end|>); the answers are the sources' own text, so the
model learns no facts that are not in the corpus.
"""
import re

SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are loom-tiny, a small language model.",
                  "Answer briefly.", "You are a friendly assistant that answers in plain English."]

IDENTITY = [
    (["Who are you?", "What are you?", "What is your name?", "Introduce yourself."],
     ["I am loom-tiny, a small language model trained to show what the loom serving engine can do. "
      "I know a little about old books, speeches, words and hacker slang, and I often get things wrong.",
      "My name is loom-tiny. I am a very small language model bundled with loom, trained on public "
      "domain books, speeches, a dictionary and a collection of fortunes."]),
    (["Hello!", "Hi", "Hello there.", "Good morning!", "Hey, how are you?"],
     ["Hello! Ask me what a word means, ask for a fortune, or ask me to tell a story.",
      "Hi there. I am a small model, but I will do my best. What would you like to talk about?"]),
    (["What can you do?", "How can you help me?", "What do you know?"],
     ["I can define words, explain some hacker jargon, quote the King James Bible, tell you about "
      "Moby-Dick and the State of the Union addresses, and share a fortune. I am tiny, so check "
      "anything important.",
      "Not much, honestly: I am a small demo model. I can explain words, quote verses, tell a fortune "
      "or continue a story."]),
    (["Thank you!", "Thanks.", "Thanks a lot."],
     ["You're welcome!", "Glad to help."]),
    (["Goodbye.", "Bye!", "See you later."],
     ["Goodbye!", "Bye, and thanks for chatting."]),
]

DEFINE = ['What does "{w}" mean?', "Define {w}.", "What is the meaning of the word {w}?",
          "What does the word {w} mean?", "Explain the word {w}.", "{w}?"]
JARGON = ["What is {t} in hacker slang?", "What does {t} mean in the Jargon File?", "Explain {t}.",
          "What does a hacker mean by {t}?"]
FORTUNE = ["Tell me a fortune.", "Give me a fortune cookie.", "Say something wise.", "Give me a quote.",
           "Tell me something funny.", "Share a saying."]
VERSE = ["Quote {r}.", "What does {r} say?", "Recite {r}.", "What is written in {r}?"]
SOTU_WHO = ["Who gave the State of the Union address in {y}?", "Which president spoke to Congress in {y}?"]
SOTU_WHAT = ["What did {p} say in the {y} State of the Union address?",
             "How did the {y} State of the Union address begin?"]
MOBY = ["What is chapter {n} of Moby-Dick called?", "Tell me about chapter {n} of Moby-Dick.",
        "How does chapter {n} of Moby-Dick begin?"]
STORY = ["Tell me a story.", "Write a short story.", "Tell me a story about the sea.",
         "Continue the story: {s}", "Write a paragraph of fiction."]
MOBY_FACTS = [(["Who wrote Moby-Dick?", "Who is the author of Moby-Dick?"],
               ["Moby-Dick was written by Herman Melville and published in 1851.",
                "Herman Melville wrote Moby-Dick."]),
              (["What is Moby-Dick about?"],
               ["Moby-Dick is the story of Captain Ahab's hunt for the white whale, told by the sailor "
                "Ishmael, who begins: \"Call me Ishmael.\""])]


def first_sentences(text, limit):
    out = ""
    for s in re.split(r"(?<=[.!?])\s+", text.replace("\n", " ")):
        if out and len(out) + len(s) > limit:
            break
        out = (out + " " + s).strip()
    return out[:limit * 2]


def turn(rng, question, answer):
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def qa_pairs(docs, rng):
    pairs = []
    for d in docs["wordnet"]:
        if rng.random() < 0.25:
            w = rng.choice(d["words"])
            ans = f"{w[:1].upper() + w[1:]} ({d['pos']}): {d['definition']}."
            if len(d["words"]) > 1:
                others = [x for x in d["words"] if x != w]
                ans += f" Similar words: {', '.join(others[:4])}."
            if d["examples"]:
                ans += f' For example: "{d["examples"][0]}"'
            pairs.append((rng.choice(DEFINE).format(w=w), ans))
    for d in docs["jargon"]:
        body = d["text"].split("\n\n", 2)
        if len(body) >= 2:
            pairs.append((rng.choice(JARGON).format(t=d["term"]), first_sentences(body[1], 500)))
    for d in docs["fortunes"]:
        if rng.random() < 0.5:
            pairs.append((rng.choice(FORTUNE), d["text"]))
    for d in docs["bible"]:
        for n, v in d["verses"]:
            if rng.random() < 0.12:
                pairs.append((rng.choice(VERSE).format(r=f"{d['chapter']}:{n}"), v))
    for d in docs["sotu"]:
        y, p = d["year"], d["president"]
        pairs.append((rng.choice(SOTU_WHO).format(y=y), f"{p} gave the State of the Union address in {y}."))
        pairs.append((rng.choice(SOTU_WHAT).format(p=p, y=y),
                      f"{p} began: \"{first_sentences(d['text'], 400)}\""))
    for d in docs["moby-dick"]:
        body = d["text"].split("\n\n", 1)[-1]
        pairs.append((rng.choice(MOBY).format(n=d["chapter"]),
                      f"Chapter {d['chapter']} of Moby-Dick is \"{d['title']}\". It begins: "
                      f"{first_sentences(body, 300)}"))
    fiction = [d for d in docs["brown"] if d["fiction"]] + docs["moby-dick"]
    for _ in range(1500):
        d = rng.choice(fiction)
        paras = [p for p in d["text"].split("\n\n") if len(p) > 200 and not p.startswith("CHAPTER")]
        if len(paras) < 2:
            continue
        k = rng.randrange(len(paras) - 1)
        q = rng.choice(STORY)
        if "{s}" in q:
            q = q.format(s=first_sentences(paras[k], 160))
            pairs.append((q, first_sentences(paras[k + 1], 600)))
        else:
            pairs.append((q, first_sentences(paras[k], 600)))
    for questions, answers in IDENTITY + MOBY_FACTS:
        for _ in range(60):
            pairs.append((rng.choice(questions), rng.choice(answers)))
    return pairs


def build(docs, rng):
    """Conversations of one to three turns, a quarter with a system prompt."""
    pairs = qa_pairs(docs, rng)
    rng.shuffle(pairs)
    chats, k = [], 0
    while k < len(pairs):
        n = rng.choice((1, 1, 1, 2, 3))
        messages = []
        if rng.random() < 0.25:
            messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        for q, a in pairs[k:k + n]:
            messages += turn(rng, q, a)
        chats.append({"source": "chat", "messages": messages})
        k += n
    return chats
