"""The labelled set the content detectors are measured on (serving/policy/_detectors.py), generated from
a seed: realistic prompts (chat, code, config, several languages and scripts) holding synthetic personal
data, ids and credentials, each value's span labelled as it is written in, and hard negatives that look
like them (numbers failing their checksum, ISBNs, dates, versions, UUIDs, reserved example addresses,
placeholders).

Values are valid or invalid by construction: this module computes the check digits itself (it never
asks the detectors), so the set measures the detectors rather than agreeing with them. No value belongs
to anyone: names are random syllables, phone numbers lie in the ranges set aside for fiction (555-01xx,
Ofcom's drama ranges), IP addresses in the documentation networks, keys are random characters.

Some positives are written in forms the detectors deliberately do not read (phone numbers without
separators, a password in a sentence, a lowercase IBAN, a non-ASCII mailbox): a human would label them,
so they stay in the set and count against recall.

Every line carries a `form` tag saying how its values are written: "plain", "named", ..., the forms of
the hardening issue (VARIANT_FORMS and "card_glued": cards separated by no-break spaces, tabs, dots,
slashes, line breaks, en dashes, underscores, invisible characters; IBANs with dashes; emails with a
full-width "@" ...), other forms normalisation reads (EXTRA_FORMS), forms left alone on purpose
(KNOWN_MISS_FORMS), hard negatives ("hard_negative", "checksum_<kind>"), and "ordinary:<category>"
for ordinary prompts: numbers, times, versions, dates, prices, arithmetic, code, with no personal data.
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from pathlib import Path

Segment = tuple[str, "str | None"]  # text and the detector that should find it (None: plain text)
Piece = list[Segment]

SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vo", "qui", "zel", "bra", "nu", "dor", "fey", "lin", "mar", "sol", "tek"]
TLDS = ["com", "net", "org", "de", "fr", "io", "es", "nl", "co.uk", "ch"]
B64URL = string.ascii_letters + string.digits + "-_"
ALNUM = string.ascii_letters + string.digits


def word(rng: random.Random, n: int = 2) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(n))


def chars(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def digits(rng: random.Random, n: int) -> str:
    return chars(rng, string.digits, n)


# ---- check digits, computed here (the generating direction) ---------------------------------------


def luhn_digit(body: str) -> str:
    """The digit that makes body + digit pass Luhn."""
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:  # these positions are doubled once the check digit is appended
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def iban_check(country: str, bban: str) -> str:
    """ISO 7064 mod 97-10 check digits: 98 - (bban + country + '00' as a number) mod 97."""
    as_digits = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{98 - int(as_digits) % 97:02d}"


def bsn_check(first8: str) -> int | None:
    """The ninth digit that makes a BSN pass the 11-test, or None when none does."""
    s = sum(w * int(c) for w, c in zip(range(9, 1, -1), first8)) % 11
    return s if s <= 9 else None


def dni_letter(number: int) -> str:
    return "TRWAGMYFPDXBNJZSQVHLCKE"[number % 23]


# ---- value generators: each returns the value's text ----------------------------------------------


def email(rng: random.Random) -> str:
    first, last = word(rng), word(rng, 3)
    local = rng.choice([f"{first}.{last}", f"{first[0]}{last}{rng.randint(1, 99)}", f"{first}_{last}+{word(rng, 1)}"])
    return f"{local}@{word(rng, 2)}-{word(rng, 1)}.{rng.choice(TLDS)}"


def phone(rng: random.Random) -> str:
    fiction = f"01{rng.randint(0, 99):02d}"  # 555-0100..0199: reserved for fiction in North America
    uk_london, uk_mobile = f"7946 0{rng.randint(0, 999):03d}", f"900{rng.randint(0, 999):03d}"
    d8 = digits(rng, 8)
    return rng.choice(
        [
            f"+1 202 555 {fiction}",
            f"+1 (415) 555-{fiction}",
            f"+1415555{fiction}",
            f"(212) 555-{fiction}",
            f"312-555-{fiction}",
            f"646.555.{fiction}",
            f"+44 20 {uk_london}",
            f"+44 (0)20 {uk_london}",
            f"020 {uk_london}",
            f"07700 {uk_mobile}",
            f"+44 7700 {uk_mobile}",
            f"+49 30 {d8[:7]}",
            f"030 {d8[:7]}",
            f"0171 {d8[:7]}",
            f"+33 6 {d8[0:2]} {d8[2:4]} {d8[4:6]} {d8[6:8]}",
            f"06 {d8[0:2]} {d8[2:4]} {d8[4:6]} {d8[6:8]}",
            f"01.{d8[0:2]}.{d8[2:4]}.{d8[4:6]}.{d8[6:8]}",
            f"+31 6 {d8}",
            f"06-{d8}",
            f"+34 612 {d8[:3]} {d8[3:6]}",
        ]
    )


CARD_PREFIXES = [("4", 16), ("4", 13), ("51", 16), ("55", 16), ("2221", 16), ("2720", 16), ("34", 15), ("37", 15)]
CARD_PREFIXES += [("6011", 16), ("65", 16), ("3530", 16), ("36", 14), ("62", 16)]


def card_digits(rng: random.Random) -> str:
    prefix, length = rng.choice(CARD_PREFIXES)
    body = prefix + digits(rng, length - len(prefix) - 1)
    return body + luhn_digit(body)


def group_card(rng: random.Random, number: str) -> str:
    sep = rng.choice([" ", "-", ""])
    if len(number) == 15 and sep:
        return sep.join([number[:4], number[4:10], number[10:]])
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


def card(rng: random.Random) -> str:
    return group_card(rng, card_digits(rng))


# BBAN shapes: "n" a digit, "a" an uppercase letter, "c" either.
IBAN_FORMATS = {"DE": "n" * 18, "FR": "n" * 10 + "c" * 11 + "nn", "GB": "aaaa" + "n" * 14, "NL": "aaaa" + "n" * 10}
IBAN_FORMATS |= {"ES": "n" * 20, "IT": "a" + "n" * 10 + "c" * 12, "BE": "n" * 12, "CH": "n" * 5 + "c" * 12}
IBAN_FORMATS |= {"AT": "n" * 16, "PL": "n" * 24, "NO": "n" * 11, "SE": "n" * 20}


def iban_compact(rng: random.Random) -> str:
    country = rng.choice(sorted(IBAN_FORMATS))
    pools = {"n": string.digits, "a": string.ascii_uppercase, "c": string.ascii_uppercase + string.digits}
    bban = "".join(rng.choice(pools[k]) for k in IBAN_FORMATS[country])
    return country + iban_check(country, bban) + bban


def group_iban(rng: random.Random, value: str) -> str:
    return " ".join(value[i : i + 4] for i in range(0, len(value), 4)) if rng.random() < 0.6 else value


def iban(rng: random.Random) -> str:
    return group_iban(rng, iban_compact(rng))


def ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


NINO_FIRST, NINO_SECOND = "ABCEGHJKLMNOPRSTWXYZ", "ABCEGHJKLMNPRSTWXYZ"


def nino(rng: random.Random) -> str:
    while (prefix := rng.choice(NINO_FIRST) + rng.choice(NINO_SECOND)) in {"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"}:
        pass
    d = digits(rng, 6)
    suffix = rng.choice("ABCD")
    return rng.choice([f"{prefix}{d}{suffix}", f"{prefix} {d[:2]} {d[2:4]} {d[4:]} {suffix}"])


def dni(rng: random.Random) -> str:
    if rng.random() < 0.3:  # NIE: X, Y or Z stands for 0, 1, 2
        lead, seven = rng.choice("XYZ"), rng.randint(0, 9_999_999)
        return f"{lead}{seven:07d}{dni_letter(int('XYZ'.index(lead) * 10_000_000 + seven))}"
    n = rng.randint(0, 99_999_999)
    return f"{n:08d}{rng.choice(['', '-'])}{dni_letter(n)}"


def bsn_digits(rng: random.Random) -> str:
    while (check := bsn_check(first := str(rng.randint(1, 9)) + digits(rng, 7))) is None:
        pass
    return first + str(check)


def aws_key(rng: random.Random) -> str:
    return rng.choice(["AKIA", "ASIA"]) + chars(rng, string.ascii_uppercase + "234567", 16)


def jwt(rng: random.Random) -> str:
    def part(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    payload = {"sub": digits(rng, 8), "name": word(rng, 3), "iat": 1_700_000_000 + rng.randint(0, 9_999_999)}
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(payload)}.{chars(rng, B64URL, 43)}"


def pem(rng: random.Random) -> str:
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    body = "\n".join(chars(rng, string.ascii_letters + string.digits + "+/", 64) for _ in range(rng.randint(3, 6)))
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


def secret_value(rng: random.Random) -> str:
    return chars(rng, ALNUM, rng.randint(6, 10)) + rng.choice("!#%&*") + str(rng.randint(0, 99))


def token(rng: random.Random) -> str:
    return rng.choice(
        [
            aws_key(rng),
            "ghp_" + chars(rng, ALNUM, 36),
            "gho_" + chars(rng, ALNUM, 36),
            "glpat-" + chars(rng, ALNUM + "_-", 20),
            f"xoxb-{digits(rng, 11)}-{digits(rng, 12)}-{chars(rng, ALNUM, 24)}",
            "sk_live_" + chars(rng, ALNUM, 24),
            "rk_test_" + chars(rng, ALNUM, 30),
            "sk-proj-" + chars(rng, ALNUM, 20) + digits(rng, 4) + chars(rng, ALNUM + "_-", 40),
            "sk-" + chars(rng, ALNUM, 44) + digits(rng, 4),
            "AIza" + chars(rng, ALNUM + "_-", 35),
            jwt(rng),
        ]
    )


def ipv4(rng: random.Random) -> str:
    return rng.choice(
        [
            f"192.0.2.{rng.randint(1, 254)}",
            f"198.51.100.{rng.randint(1, 254)}",
            f"203.0.113.{rng.randint(1, 254)}",
            f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        ]
    )


# ---- carriers: the prompts values are written into ("{}" is the value) ----------------------------

CHAT = [
    "Can you write a polite reminder to {} about the overdue invoice?",
    "My details for the form: {}. Please fill in the rest.",
    "Summarise this support ticket. Customer contact: {} - issue: login loop after update.",
    "Translate to German: 'Please reach me at {} tomorrow.'",
    "Is this correct? I typed {} into the payment page and it was declined.",
    "hey, quick one, use {} for the booking and tell me what else you need",
    "Draft an email to HR. Include {} so they can update my record.",
    "{} <- this is what the bank asked me to confirm, what does it mean?",
]
MULTILINGUAL = [
    "Bitte schreibe eine kurze Nachricht an {} wegen des Termins am Montag.",
    "Peux-tu vérifier ceci : {} ? Merci d'avance !",
    "¿Puedes redactar una carta? Mis datos: {}, gracias.",
    "Kun je dit controleren: {} – alvast bedankt.",
    "请帮我写一封邮件，联系方式是{}，谢谢。",
    "以下の情報で予約してください：{}。よろしくお願いします。",
    "Проверь, пожалуйста: {} — это правильно?",
    "Résumé 📎 — données client « {} » à anonymiser 🙏",
]
CODE = [
    "Why does this fail?\n```python\nclient = connect(user='{}')\n```",
    "Here's my config:\n```yaml\ncontact: {}\nretries: 3\n```",
    "fix the bug: `send_to({})` raises TypeError",
    'const target = "{}"; // TODO remove before commit',
]
CARRIERS = {"chat": CHAT, "multilingual": MULTILINGUAL, "code": CODE}

Generator = Callable[[random.Random], str]
POSITIVES: dict[str, Generator] = {
    "email": email,
    "phone": phone,
    "payment_card": card,
    "iban": iban,
    "national_id": lambda rng: rng.choice([ssn, nino, dni])(rng),
    "credential": token,
    "ip_address": ipv4,
}


def in_carrier(rng: random.Random, pieces: Piece) -> Piece:
    template = rng.choice(CARRIERS[rng.choice(sorted(CARRIERS))])
    before, after = template.split("{}")
    return [(before, None), *pieces, (after, None)]


def named_values(rng: random.Random) -> Piece:
    """Values that only count with their name next to them: a BSN, an SSN written without dashes."""
    if rng.random() < 0.5:
        lead = rng.choice(["Mijn BSN is ", "BSN: ", "burgerservicenummer ", "Client BSN "])
        return [(lead, None), (bsn_digits(rng), "national_id")]
    area = rng.choice([a for a in range(1, 900) if a != 666])
    value = f"{area:03d}{rng.randint(1, 99):02d}{rng.randint(1, 9999):04d}"
    return [(rng.choice(["SSN: ", "my ssn is ", "Social Security Number "]), None), (value, "national_id")]


def assignment(rng: random.Random) -> Piece:
    """A secret assigned in code or configuration; the value alone is labelled."""
    key = rng.choice(["password", "DB_PASSWORD", "api_key", "API_KEY", "client_secret", "secret_key", "access_token"])
    value = rng.choice([secret_value(rng), token(rng)])
    return rng.choice(
        [
            [(f'```python\n{key.lower()} = "', None), (value, "credential"), ('"\n```\nwhy is auth failing?', None)],
            [(f"my .env has\n{key.upper()}=", None), (value, "credential"), ("\nand the app still can't log in", None)],
            [(f'{{"user": "{word(rng)}", "{key.lower()}": "', None), (value, "credential"), ('"} -- parse this', None)],
            [(f"config.yaml:\n  {key.lower()}: ", None), (value, "credential"), ("\n  timeout: 30", None)],
        ]
    )


def positive(rng: random.Random, detector: str) -> tuple[str, Piece]:
    """A form tag and a prompt holding one value of the detector's."""
    if detector == "national_id" and rng.random() < 0.25:
        return "named", in_carrier(rng, named_values(rng))
    if detector == "credential" and rng.random() < 0.3:
        return "assignment", assignment(rng)
    if detector == "credential" and rng.random() < 0.15:
        return "pem_block", [("Why won't ssh accept this key?\n", None), (pem(rng), "credential"), ("\nthanks", None)]
    return "plain", in_carrier(rng, [(POSITIVES[detector](rng), detector)])


def mixed(rng: random.Random) -> Piece:
    """Two or three values in one prompt."""
    names = rng.sample(sorted(POSITIVES), rng.randint(2, 3))
    pieces: Piece = [("Update the customer record: ", None)]
    for i, name in enumerate(names):
        pieces += [(f"{name.replace('_', ' ')} ", None), (POSITIVES[name](rng), name)]
        pieces.append(("; " if i < len(names) - 1 else ". Thanks!", None))
    return pieces


def hard_positive(rng: random.Random) -> tuple[str, Piece]:
    """Harder forms: most the detectors deliberately do not read (no separators, a password in a sentence,
    a non-ASCII mailbox, a lowercase NINO), labelled all the same; a card followed by its expiry date."""
    d8 = digits(rng, 8)
    options: list[tuple[str, Piece]] = [
        ("phone_no_separators", [("call me on ", None), (f"06{d8}", "phone"), (" after six", None)]),
        (
            "nanp_no_separators",
            [("my cell is ", None), (f"212555{f'01{rng.randint(0, 99):02d}'}", "phone"), (", text first", None)],
        ),
        (
            "password_in_sentence",
            [("my password is ", None), (secret_value(rng), "credential"), (" but I forgot which account", None)],
        ),
        (
            "iban_lowercase",
            [("iban (lowercase, from my notes): ", None), (iban_compact(rng).lower(), "iban"), ("", None)],
        ),
        (
            "card_then_expiry",
            [("card ", None), (group_card(rng, card_digits(rng)).replace("-", " "), "payment_card"), (" 12/29", None)],
        ),
        ("email_non_ascii", [("écris à ", None), (f"josé.{word(rng)}@{word(rng)}.fr", "email"), (" demain", None)]),
        ("nino_lowercase", [("NINO lowercase: ", None), (nino(rng).lower(), "national_id"), ("", None)]),
    ]
    return rng.choice(options)


# ---- hard negatives: look like the values, are not them -------------------------------------------


def off_by_one(value: str, rng: random.Random) -> str:
    """value with one digit changed (its checksum then fails: Luhn, mod 97 and the 11-test all catch it)."""
    spots = [i for i, ch in enumerate(value) if ch.isdigit()]
    i = rng.choice(spots[-6:])
    return value[:i] + str((int(value[i]) + rng.randint(1, 9)) % 10) + value[i + 1 :]


def checksum_negative(rng: random.Random) -> tuple[str, Piece]:
    """A value of the right shape that fails its own check, in a prompt: a card or an IBAN one digit
    off, a named BSN one digit off, a DNI with another letter, a never-issued SSN, an unallocated NINO."""
    kind = rng.choice(["card", "iban", "bsn", "dni", "ssn", "nino"])
    if kind == "card":
        value = group_card(rng, off_by_one(card_digits(rng), rng))
    elif kind == "iban":
        value = group_iban(rng, off_by_one(iban_compact(rng), rng))
    elif kind == "bsn":
        value = "BSN " + off_by_one(bsn_digits(rng), rng)
    elif kind == "dni":
        n = rng.randint(0, 99_999_999)
        value = f"{n:08d}{dni_letter(n + rng.randint(1, 22))}"
    elif kind == "ssn":
        area, group, serial = f"{rng.randint(1, 665):03d}", f"{rng.randint(1, 99):02d}", f"{rng.randint(1, 9999):04d}"
        broken = rng.choice(["area", "group", "serial"])
        if broken == "area":
            area = rng.choice(["000", "666", f"9{rng.randint(0, 99):02d}"])
        elif broken == "group":
            group = "00"
        else:
            serial = "0000"
        value = f"{area}-{group}-{serial}"
    else:
        prefix = rng.choice(["QQ", "GB", "NK", "TN", "ZZ", "DA", "FA", "AO"])
        value = f"{prefix}{digits(rng, 6)}{rng.choice('ABCD')}"
    return f"checksum_{kind}", in_carrier(rng, [(value, None)])


def negative(rng: random.Random) -> str:
    card_bad = card_digits(rng)
    card_bad = card_bad[:-1] + str((int(card_bad[-1]) + rng.randint(1, 9)) % 10)
    iban_bad = iban_compact(rng)
    iban_bad = iban_bad[:2] + f"{(int(iban_bad[2:4]) + rng.randint(1, 50)) % 97 + 2:02d}" + iban_bad[4:]
    # new check digits 02-98, never the old ones: the mod-97 check fails
    bsn_bad = off_by_one(bsn_digits(rng), rng)
    uuid = "-".join(chars(rng, "0123456789abcdef", n) for n in (8, 4, 4, 4, 12))
    year, month, day = rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)
    b64 = base64.b64encode(" ".join(word(rng) for _ in range(6)).encode()).decode()
    n = rng.randint(0, 99_999_999)
    options = [
        f"Order #{rng.randint(100000, 999999)}-{rng.randint(10, 99)} shipped, tracking {digits(rng, 12)}",
        f"card ending {card_bad[-4:]}, full number on file: {group_card(rng, card_bad)}",
        f"test this number please: {card_bad}",
        f"IBAN check failed for {group_iban(rng, iban_bad)}",
        f"Mijn BSN is {bsn_bad}, klopt dat?",
        f"invoice number {bsn_digits(rng)} is overdue",
        f"ISBN 978-{rng.randint(0, 9)}-{rng.randint(10, 99)}-{rng.randint(100000, 999999)}-{rng.randint(0, 9)} and 979{digits(rng, 10)}",
        f"Timestamp: {year}-{month:02d}-{day:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        f"meeting on {day:02d}-{month:02d}-{year} {rng.randint(10, 23)}:30 in room {rng.randint(100, 999)}",
        f"on {day:02d}/{month:02d}/{year} we sold {rng.randint(1000, 9999)} units",
        f"compute {rng.randint(100, 999)} - {rng.randint(10, 99)} - {rng.randint(1, 9)} and {rng.randint(1000, 9999)} * {rng.randint(10, 99)}",
        f"solve 2x + {rng.randint(100, 999)} = {rng.randint(1000, 9999)} for x",
        f"upgrade from v{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 99)} to version {rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 99)}.{rng.randint(1000, 99999)}",
        f"request id {uuid} failed",
        f"commit {chars(rng, '0123456789abcdef', 40)} broke the build",
        f"decode this base64: {b64}",
        f"use jane.doe@example.com or {word(rng)}@example.org as the sample address",
        f"clone git@github.com:{word(rng)}/{word(rng)}.git and run make",
        "the logo is at static/logo@2x.png and icon@3x.webp",
        f"decorate with @{word(rng)}_cache and install @{word(rng)}/core",
        f"publishable key pk_live_{chars(rng, ALNUM, 24)} is fine in the browser",
        "AWS docs use AKIAIOSFODNN7EXAMPLE as the sample access key id",
        'password = "<your password here>"',
        "api_key = os.environ['API_KEY']",
        "def login(user: str, password: str) -> bool:",
        "client = Client(api_key=api_key, timeout=30)",
        f"max_tokens: {rng.randint(1000, 99999)}\ntoken_count = {rng.randint(10000000, 99999999)}",
        f"-----BEGIN PUBLIC KEY-----\n{chars(rng, ALNUM, 64)}\n-----END PUBLIC KEY-----",
        f"-----BEGIN CERTIFICATE-----\n{chars(rng, ALNUM, 64)}\n-----END CERTIFICATE-----",
        f"the IPs {rng.randint(256, 999)}.{rng.randint(0, 255)}.1.1 and 10.0.{rng.randint(0, 9)} are invalid",
        f"Windows build 10.0.{rng.randint(10000, 22999)}.{rng.randint(1, 999)}",
        f"SSN 000-{rng.randint(10, 99)}-{rng.randint(1000, 9999)} and 666-{rng.randint(10, 99)}-{rng.randint(1000, 9999)} are never issued, nor 9{rng.randint(10, 99)}-{rng.randint(10, 99)}-{rng.randint(1000, 9999)}",
        f"NINO QQ{digits(rng, 6)}C is the documentation example; GB{digits(rng, 6)}A is not allocated",
        f"DNI {n:08d}{'TRWAGMYFPDXBNJZSQVHLCKE'[(n + rng.randint(1, 22)) % 23]} has the wrong letter",
        f"the product code is {digits(rng, 10)} and the zip is {rng.randint(10000, 99999)}",
        f"extension {rng.randint(100, 9999)}, room {rng.randint(1, 9)}.{rng.randint(10, 99)}",
        f"branch sk-{word(rng)}-{word(rng)}-{word(rng)}-{word(rng)}-{word(rng)}-fix",
        f"hash sha256:{chars(rng, '0123456789abcdef', 64)}",
        f"{digits(rng, 4)} {digits(rng, 4)} {digits(rng, 4)} {digits(rng, 4)} {digits(rng, 4)} are the five lottery draws",
        f"call {rng.randint(1, 9)}{rng.randint(0, 9)}{rng.randint(0, 9)}-{rng.randint(1000, 9999)} internal",
        f"slice x = a[0:{rng.randint(10, 99)}], ratio 3:2, time {rng.randint(10, 23)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}",
        f'url: "https://api.{word(rng)}.com/v1/items?page={rng.randint(1, 99)}"\n"secret": true',
        "Password: ********",
        "token: ${{ secrets.GITHUB_TOKEN }}",
        "api_key: str = Field(..., description='the key')",
        f"the card 1{digits(rng, 3)} {digits(rng, 4)} {digits(rng, 4)} {digits(rng, 4)} from the manual is a dummy",
        f"lat/long {rng.randint(10, 80)}.{digits(rng, 4)}, {rng.randint(1, 9)}.{digits(rng, 4)}; port {rng.randint(1024, 65535)}",
        f"ISO week {year}-W{rng.randint(10, 52)}, RFC {rng.randint(1000, 9999)}, HTTP/1.1 {rng.choice([200, 404, 500])}",
        f"Datum: {day:02d}.{month:02d}.{year}, Rechnung Nr. {digits(rng, 6)}",
        f"upgrade to version {rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}.{rng.randint(1, 99)} before Friday",
        f"docker pull {word(rng)}@sha256:{chars(rng, '0123456789abcdef', 64)}",
        f"请在{year}年{month}月{day}日之前付款，订单号{digits(rng, 10)}。",
        # first digit 1 or 9: no card issuer starts so, whatever the Luhn sum
        f"Le colis {rng.choice('19')}{digits(rng, 3)} {digits(rng, 4)} {digits(rng, 4)} {digits(rng, 4)} {digits(rng, 2)} est en route.",
        f"{rng.randint(100, 999)} + {rng.randint(100, 999)} = ? and ({rng.randint(100, 999)}) {rng.randint(100, 999)}-{rng.randint(10, 99)}",
    ]
    return rng.choice(options)


# ---- variants: the values written the ways people (and their tools) write them --------------------

ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]  # space, non-joiner, joiner, word joiner, BOM


def card_groups(rng: random.Random) -> list[str]:
    """A valid card number in its usual groups: by fours, American Express 4-6-5."""
    number = card_digits(rng)
    if len(number) == 15:
        return [number[:4], number[4:10], number[10:]]
    return [number[i : i + 4] for i in range(0, len(number), 4)]


def card_joined(separator: str) -> Generator:
    return lambda rng: separator.join(card_groups(rng))


def card_newline(rng: random.Random) -> str:
    """Broken over lines: a wrapped line (a space turned line break) or one group a line."""
    groups = card_groups(rng)
    if rng.random() < 0.3:
        return "\n".join(groups)
    at = rng.randrange(1, len(groups))
    return " ".join(groups[:at]) + "\n" + " ".join(groups[at:])


def inserted(rng: random.Random, value: str, marks: list[str], count: int) -> str:
    """value with count invisible marks put between two of its characters (never at either end)."""
    spots = sorted(rng.sample(range(1, len(value)), count))
    out, last = [], 0
    for spot in spots:
        out += [value[last:spot], rng.choice(marks)]
        last = spot
    return "".join(out) + value[last:]


def card_zero_width(rng: random.Random) -> str:
    value = rng.choice([" ", ""]).join(card_groups(rng))
    return inserted(rng, value, ZERO_WIDTH, rng.randint(1, 4))


def card_soft_hyphen(rng: random.Random) -> str:
    value = rng.choice([" ", ""]).join(card_groups(rng))
    return inserted(rng, value, ["\u00ad"], rng.randint(1, 3))


def iban_joined(separators: list[str]) -> Generator:
    def generate(rng: random.Random) -> str:
        value = iban_compact(rng)
        return rng.choice(separators).join(value[i : i + 4] for i in range(0, len(value), 4))

    return generate


def email_fullwidth_at(rng: random.Random) -> str:
    value = email(rng).replace("@", "\uff20")
    return value.replace(".", "\uff0e") if rng.random() < 0.25 else value  # a full-width dot too


def email_zero_width(rng: random.Random) -> str:
    return inserted(rng, email(rng), ZERO_WIDTH, rng.randint(1, 2))


FULLWIDTH = str.maketrans("0123456789.", "０１２３４５６７８９．")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def glued_card(rng: random.Random) -> Piece:
    """A card number typed against a word, before or after it; the digits alone are labelled."""
    value = rng.choice(["", "", " "]).join(card_groups(rng))
    if rng.random() < 0.6:
        glue = rng.choice(["card", "Visa", "cc", "Karte", "tarjeta", "carte", "CardNo", "Kreditkarte"])
        return [(glue, None), (value, "payment_card")]
    return [(value, "payment_card"), (rng.choice(["exp", "CVV", "thanks", "bitte", "gracias"]), None)]


def mixed_separators(rng: random.Random) -> str:
    groups = card_groups(rng)
    seps = rng.sample(["-", " ", ".", "/"], 2)
    return groups[0] + "".join(seps[i % 2] + g for i, g in enumerate(groups[1:]))


def obfuscated_email(rng: random.Random) -> str:
    local, domain = email(rng).split("@")
    at, dot = rng.choice([(" at ", " dot "), (" [at] ", " [dot] "), ("(at)", "(dot)"), (" AT ", " DOT ")])
    return local + at + domain.replace(".", dot)


def homoglyph_iban(rng: random.Random) -> str:
    """An IBAN whose country code holds a Cyrillic look-alike (Е, Т, О, ...): NFKC keeps it Cyrillic."""
    value = iban_compact(rng)
    look_alike = {"E": "Е", "T": "Т", "O": "О", "B": "В", "H": "Н", "P": "Р", "C": "С", "A": "А", "K": "К"}
    swappable = [i for i in (0, 1) if value[i] in look_alike]
    while not swappable:
        value = iban_compact(rng)
        swappable = [i for i in (0, 1) if value[i] in look_alike]
    i = rng.choice(swappable)
    return value[:i] + look_alike[value[i]] + value[i + 1 :]


def unnamed_dni(rng: random.Random) -> str:
    n = rng.randint(0, 99_999_999)
    return f"{n:08d}{dni_letter(n)}"


# The forms of the hardening issue (each a way a user would expect a value caught), the forms
# normalisation catches besides, and the forms deliberately left alone (docs/policies.md lists them as
# known misses); each a (detector, value) generator written into a carrier prompt.
VARIANT_FORMS: dict[str, tuple[str, Generator]] = {
    "card_nbsp": ("payment_card", card_joined("\u00a0")),
    "card_narrow_nbsp": ("payment_card", card_joined("\u202f")),
    "card_tab": ("payment_card", card_joined("\t")),
    "card_dots": ("payment_card", card_joined(".")),
    "card_slashes": ("payment_card", card_joined("/")),
    "card_double_space": ("payment_card", card_joined("  ")),
    "card_newline": ("payment_card", card_newline),
    "card_en_dash": ("payment_card", lambda rng: rng.choice(["\u2013", " \u2013 "]).join(card_groups(rng))),
    "card_underscore": ("payment_card", card_joined("_")),
    "card_zero_width": ("payment_card", card_zero_width),
    "card_soft_hyphen": ("payment_card", card_soft_hyphen),
    "iban_dashes": ("iban", iban_joined(["-"])),
    "iban_nbsp": ("iban", iban_joined(["\u00a0", "\u202f"])),
    "email_fullwidth_at": ("email", email_fullwidth_at),
    "email_zero_width": ("email", email_zero_width),
}
EXTRA_FORMS: dict[str, tuple[str, Generator]] = {
    "card_fullwidth_digits": ("payment_card", lambda rng: " ".join(card_groups(rng)).translate(FULLWIDTH)),
    "card_arabic_indic_digits": ("payment_card", lambda rng: " ".join(card_groups(rng)).translate(ARABIC_INDIC)),
    "phone_nbsp": ("phone", lambda rng: f"+44\u00a020\u00a07946\u00a00{rng.randint(0, 999):03d}"),
    "ssn_en_dash": ("national_id", lambda rng: ssn(rng).replace("-", "\u2013")),
    "ip_fullwidth": ("ip_address", lambda rng: ipv4(rng).translate(FULLWIDTH)),
}
OTHER_FORMS = ("dni_named", "checksum_dni_named")  # a DNI after its name, with its letter and with another
KNOWN_MISS_FORMS: dict[str, tuple[str, Generator]] = {
    "card_mixed_separators": ("payment_card", mixed_separators),
    "card_digit_by_digit": ("payment_card", lambda rng: " ".join(card_digits(rng))),
    "email_obfuscated": ("email", obfuscated_email),
    "iban_homoglyph_country": ("iban", homoglyph_iban),
    "dni_unnamed": ("national_id", unnamed_dni),
}


def named_dni(rng: random.Random, valid: bool) -> Piece:
    """A DNI after its name; with valid False, a letter other than its control letter (not labelled)."""
    n = rng.randint(0, 99_999_999)
    letter = dni_letter(n if valid else n + rng.randint(1, 22))
    name = rng.choice(["DNI ", "DNI: ", "mi DNI es ", "NIF ", "Documento: ", "D.N.I. "])
    return [(name, None), (f"{n:08d}{rng.choice(['', '-'])}{letter}", "national_id" if valid else None)]


def variant(rng: random.Random, form: str) -> Piece:
    if form == "card_glued":
        return in_carrier(rng, glued_card(rng))
    if form in ("dni_named", "checksum_dni_named"):
        return in_carrier(rng, named_dni(rng, valid=form == "dni_named"))
    detector, generate_value = (VARIANT_FORMS | EXTRA_FORMS | KNOWN_MISS_FORMS)[form]
    return in_carrier(rng, [(generate_value(rng), detector)])


NAMED_FORMS = (*VARIANT_FORMS, "card_glued")  # the 16 forms the issue names


# ---- ordinary prompts: numbers, times, versions, dates, prices, math, code; no personal data -------


def ordinary(rng: random.Random) -> tuple[str, str]:
    """A prompt anyone might send that holds no personal data however many numbers it has, and its
    category (the form tag is "ordinary:" and the category). Written from what prompts hold, not from
    what the detectors read; some look like values on purpose (a dotted time, a lab sample's id)."""
    r = rng.randint
    d, m, y = r(1, 28), r(1, 12), r(1995, 2030)
    h, mi = r(1, 12), r(0, 59)
    v = [r(0, 20) for _ in range(4)]
    hexa = "0123456789abcdef"
    n8 = r(10_000_000, 99_999_999)
    sample_letter = "TRWAGMYFPDXBNJZSQVHLCKE"[n8 % 23] if rng.random() < 0.5 else rng.choice(string.ascii_uppercase)
    quarter = [str(r(1000, 9999)) for _ in range(4)]
    options: dict[str, list[str]] = {
        "dotted_time": [
            f"Reminder: {h}.{h}.{h}.{h} am is too early for the stand-up, move it please",
            f"Schedule says {d}.{m}.{y % 100}.{h} pm for the review; is that the 12-hour clock?",
            f"The train leaves at {h}.{mi:02d} am and arrives at {h + 1}.{mi:02d} am; how long is the trip?",
        ],
        "clock_time": [
            f"Set an alarm for {h:02d}:{mi:02d} and another at {h + 12}:{r(10, 59)}.",
            f"The log shows {y}-{m:02d}-{d:02d} {h:02d}:{mi:02d}:{r(10, 59)}.{r(100, 999)} twice, why?",
            f"Convert {h}:{mi:02d} pm UTC to CET and to {h + 8}:{mi:02d} in Tokyo.",
        ],
        "date": [
            f"Between {d:02d}.{m:02d}.{y} and {d:02d}.{m:02d}.{y + 1} we shipped {r(1000, 9999):,} units; growth rate?",
            f"Is {m:02d}/{d:02d}/{y} a weekday? Also {y}/{m:02d}/{d:02d} in the ISO calendar.",
            f"Write a birthday card for my niece turning {r(3, 12)} on {d} {rng.choice(['March', 'June', 'October'])}.",
        ],
        "version": [
            f"After upgrading from Python 3.{r(8, 11)}.{r(0, 9)} to 3.{r(12, 13)}.{r(0, 5)}, numpy {r(1, 2)}.{r(0, 26)}.{r(0, 4)} fails to import",
            f"Chrome {r(110, 130)}.0.{r(5000, 6999)}.{r(10, 200)} crashes on this page, any idea?",
            f"La versión {v[0] + 1}.{v[1]}.{v[2]}.{v[3]} del firmware no arranca, ¿qué hago?",
            f"Version {v[0] + 1}.{v[1]}.{v[2]}.{v[3]} broke the build; roll back to {v[0] + 1}.{v[1]}.{v[2]}.",
            f"pip install 'django>={r(3, 4)}.{r(0, 2)}.{r(0, 9)},<{r(5, 6)}.0' fails with a resolver error",
            f"Update the Android app from {v[0] + 1}.{v[1]}.{v[2]} to build {r(100, 999)} before the release.",
        ],
        "section": [
            f"See section {v[0] + 1}.{v[1] + 1}.{v[2] + 1}.{v[3] + 1} of the spec: what does MUST NOT mean there?",
            f"Summarise clause {v[0] + 1}.{v[1] + 1}.{v[2] + 1}.{v[3] + 1} of the contract in plain English.",
            f"Erkläre Abschnitt {v[0] + 1}.{v[1] + 1}.{v[2] + 1} der Norm in einfachen Worten.",
            f"Per § {v[0] + 1}.{v[1] + 1}.{v[2] + 1}.{v[3] + 1}, who pays the transfer fees?",
        ],
        "price": [
            f"Is ${r(100, 9999):,}.{r(10, 99)} a fair price for a used bike? The new one is ${r(1000, 4999):,}.",
            f"Le total est de {r(1, 9)}\u202f{r(100, 999)},{r(10, 99)}\u00a0€ TTC, combien hors taxe à 20 % ?",
            f"Die Rechnung über {r(1, 9)}.{r(100, 999)},{r(10, 99)} € vom {d:02d}.{m:02d}.{y} ist noch offen.",
            f"CHF {r(1, 9)}'{r(100, 999)}.{r(10, 99)} in EUR at 0.{r(90, 99)}?",
            f"价格是{r(1, 99)},{r(100, 999)}元，打{r(5, 9)}折后是多少？",
        ],
        "large_number": [
            f"World population is about 8\u00a0{r(100, 999)}\u00a0{r(100, 999)}\u00a0{r(100, 999)}; per km² of land?",
            f"Format {r(1, 9)}{r(100, 999)}{r(100, 999)}{r(100, 999)} with thin spaces as the French do.",
            f"What is 2^{r(40, 63)}? And 10^{r(10, 18)} in words?",
        ],
        "math": [
            f"Solve {r(2, 9)}x^2 - {r(10, 99)}x + {r(1, 99)} = 0 and show the steps.",
            f"Compute {r(1000, 9999)} × {r(1000, 9999)} + {r(1000, 9999)} - {r(1000, 9999)} by hand.",
            f"Is {r(1_000_000, 99_999_999) | 1} a prime? Factor it if not.",
            f"Integrate x^{r(2, 5)} from 0 to {r(2, 20)} and compare with the trapezoid rule at h = 0.{r(1, 5)}.",
        ],
        "constant": [
            "sqrt(2) = 1.4142135623730950488, check the last digit",
            "pi to 20 places is 3.14159265358979323846; how do I memorise it?",
            "e = 2.71828182845904523536, golden ratio 1.61803398874989484820: which is irrational?",
            f"Round 0.{digits(rng, 18)} to 4 significant figures.",
        ],
        "code": [
            f"for i in range({r(10, 4096)}):\n    x[i] = i * 0.{r(1, 9)}\nwhy is this slow?",
            f"SELECT * FROM orders WHERE id = {r(1000, 9999)} AND total > {r(1000, 9999)}.{r(10, 99)};",
            f"color: #{''.join(rng.choice(hexa) for _ in range(6))}; margin: {r(0, 16)}px {r(0, 16)}px; why is it blue?",
            f"mask = 0x{''.join(rng.choice(hexa) for _ in range(8))}; shift = {r(1, 31)}; explain the bit trick",
            f"docker run -p {r(1024, 9999)}:{r(1024, 9999)} -m {r(1, 8)}g app:{v[0] + 1}.{v[1]}.{v[2]}",
            f"arr = [{', '.join(str(r(1000, 9999)) for _ in range(5))}]\nsort it descending",
            f"git log shows {''.join(rng.choice(hexa) for _ in range(40))} as the bad commit",
        ],
        "table": [
            "Q1\tQ2\tQ3\tQ4\n" + "\t".join(quarter) + "\nplot these quarterly sales",
            f"year,units\n{y - 2},{r(1000, 9999)}\n{y - 1},{r(1000, 9999)}\n{y},{r(1000, 9999)}\nforecast next year",
            "| region | units |\n| north | " + quarter[0] + " |\n| south | " + quarter[1] + " |\ntotal?",
        ],
        "sample_id": [
            f"DNA: {n8}{sample_letter} was sequenced twice; merge the reads?",
            f"Sample {n8}{sample_letter} failed QC at step {r(2, 9)}, rerun or discard?",
            f"Part no. {n8}-{rng.choice('ABCD')} rev {r(1, 9)} replaces {n8 + r(1, 99)}-{rng.choice('ABCD')}.",
        ],
        "reference": [
            f"ISBN 978-{r(0, 1)}-{r(100, 999)}-{r(10000, 99999)}-{r(0, 9)}: who is the publisher?",
            f"RFC {r(1000, 9999)} section {r(1, 9)}.{r(1, 9)}: what changed from RFC {r(1000, 9999)}?",
            f"John {r(1, 21)}:{r(1, 40)} and Art. {r(1, 99)}.{r(1, 5)} GDPR, quote both",
            f"Order #{y}-{m:02d}-{d:02d}-{r(1, 9999):04d} has not shipped, write a complaint",
        ],
        "measurement": [
            f"Convert {r(1, 200)}.{r(1, 9)} kg to lbs and {r(100, 250)} cm to feet.",
            f"The coordinates {r(10, 60)}.{digits(rng, 4)}, {r(1, 30)}.{digits(rng, 4)} are where on the map?",
            f"A {r(2, 9)}.{r(1, 9)} GHz CPU with {r(8, 64)} GB RAM and a {r(256, 4096)} GB SSD, good for gaming?",
        ],
        "multilingual": [
            f"会议在{y}年{m}月{d}日下午{h}点，预算{r(1, 99)},{r(100, 999)}元，请写通知。",
            f"価格は{r(1, 99)},{r(100, 999)}円です。税込みでいくらですか？".translate(FULLWIDTH),
            f"Встреча в {h:02d}:{mi:02d}, комната {r(100, 999)}, версия {v[0] + 1}.{v[1]}.{v[2]}.{v[3]}.",
            f"Le rendez-vous est à {h} h {mi:02d}, salle {r(1, 9)}.{r(10, 99)}, le {d:02d}/{m:02d}/{y}.",
            f"Kun je versie {v[0] + 1}.{v[1]}.{v[2]}.{v[3]} installeren vóór {d}-{m}-{y}?",
        ],
        "prose": [
            f"Write a {r(100, 500)}-word story about {r(2, 12)} cats who open a bakery in {y}.",
            f"Give me {r(3, 10)} tips to run {r(5, 42)} km under {r(2, 5)} hours.",
            f"My team of {r(3, 20)} closed {r(10, 99)} tickets in sprint {r(10, 99)}; write the retro summary.",
        ],
    }
    category = rng.choice(sorted(options))
    return category, rng.choice(options[category])


def build(pieces: Piece, form: str) -> dict[str, object]:
    text, labels = "", []
    for part, detector in pieces:
        if detector is not None:
            labels.append({"detector": detector, "start": len(text), "end": len(text) + len(part)})
        text += part
    return {"form": form, "text": text, "labels": labels}


def tagged(form_and_pieces: tuple[str, Piece]) -> dict[str, object]:
    return build(form_and_pieces[1], form_and_pieces[0])


DETECTOR_NAMES = tuple(POSITIVES)


def generate(
    seed: int = 29,
    *,
    per_detector: int = 40,
    hard_positives: int = 20,
    negatives: int = 160,
    checksum_negatives: int = 60,
    mixed_lines: int = 30,
    per_named_form: int = 20,
    per_other_form: int = 10,
    ordinary_prompts: int = 300,
) -> list[dict[str, object]]:
    """The labelled set, each line tagged with its form: per_detector positive prompts for each detector,
    hard positives, hard negatives, values failing their check, prompts mixing several values (shuffled);
    then per_named_form prompts of each form the hardening issue names, per_other_form of the other
    variants (caught, or known misses), and ordinary prompts (shuffled, from the next seed, so that the
    first part's lines stay what they were). The same seed gives the same lines."""
    rng = random.Random(seed)
    lines = [tagged(positive(rng, name)) for name in DETECTOR_NAMES for _ in range(per_detector)]
    lines += [tagged(hard_positive(rng)) for _ in range(hard_positives)]
    lines += [build([(negative(rng), None)], "hard_negative") for _ in range(negatives)]
    lines += [tagged(checksum_negative(rng)) for _ in range(checksum_negatives)]
    lines += [build(mixed(rng), "mixed") for _ in range(mixed_lines)]
    rng.shuffle(lines)
    rng = random.Random(seed + 1)
    more = [build(variant(rng, form), form) for form in NAMED_FORMS for _ in range(per_named_form)]
    others = (*EXTRA_FORMS, *KNOWN_MISS_FORMS, *OTHER_FORMS)
    more += [build(variant(rng, form), form) for form in others for _ in range(per_other_form)]
    for _ in range(ordinary_prompts):
        category, text = ordinary(rng)
        more.append(build([(text, None)], f"ordinary:{category}"))
    rng.shuffle(more)
    return lines + more


def write(lines: list[dict[str, object]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
