"""Sealing the secret part of a question so the bank does not show answers at a glance (lesson 00).

This is obfuscation, not security: the key is derived from a public salt and the question's
lesson and id, so anyone who reads this file can open a seal. It keeps a learner who browses
the bank files from seeing the right option, the explanations or the numbers before trying.
Instructors who need secrecy grade with nbgrader, whose released notebooks hold no answers.
"""

from __future__ import annotations

import base64
import hashlib
import json

SALT = "kvcourse quick checks, v1"


def _keystream(lesson: str, question_id: str, length: int) -> bytes:
    blocks = []
    counter = 0
    while sum(len(b) for b in blocks) < length:
        blocks.append(hashlib.sha256(f"{SALT}|{lesson}|{question_id}|{counter}".encode()).digest())
        counter += 1
    return b"".join(blocks)[:length]


def seal(secret: dict, lesson: str, question_id: str) -> str:
    """The secret fields of a question as an opaque base64 string."""
    plain = json.dumps(secret, sort_keys=True, ensure_ascii=False).encode("utf-8")
    mixed = bytes(a ^ b for a, b in zip(plain, _keystream(lesson, question_id, len(plain)), strict=True))
    return base64.b64encode(mixed).decode("ascii")


def unseal(sealed: str, lesson: str, question_id: str) -> dict:
    """The secret fields back from seal(); ValueError if the seal is damaged or belongs elsewhere."""
    try:
        mixed = base64.b64decode(sealed.encode("ascii"), validate=True)
        plain = bytes(a ^ b for a, b in zip(mixed, _keystream(lesson, question_id, len(mixed)), strict=True))
        secret = json.loads(plain.decode("utf-8"))
    except (ValueError, UnicodeError) as err:
        raise ValueError(
            f"the sealed answer of question {question_id!r} (lesson {lesson}) cannot be "
            f"opened; was it sealed for another lesson or id? ({err})"
        ) from None
    if not isinstance(secret, dict):
        raise ValueError(f"the sealed answer of question {question_id!r} is not a table")
    return secret
