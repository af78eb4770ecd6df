"""The labelled set the content detectors are measured on (serving/policy/detectors.py), generated from
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


def positive(rng: random.Random, detector: str) -> Piece:
    if detector == "national_id" and rng.random() < 0.25:
        return in_carrier(rng, named_values(rng))
    if detector == "credential" and rng.random() < 0.3:
        return assignment(rng)
    if detector == "credential" and rng.random() < 0.15:
        return [("Why won't ssh accept this key?\n", None), (pem(rng), "credential"), ("\nthanks", None)]
    return in_carrier(rng, [(POSITIVES[detector](rng), detector)])


def mixed(rng: random.Random) -> Piece:
    """Two or three values in one prompt."""
    names = rng.sample(sorted(POSITIVES), rng.randint(2, 3))
    pieces: Piece = [("Update the customer record: ", None)]
    for i, name in enumerate(names):
        pieces += [(f"{name.replace('_', ' ')} ", None), (POSITIVES[name](rng), name)]
        pieces.append(("; " if i < len(names) - 1 else ". Thanks!", None))
    return pieces


def hard_positive(rng: random.Random) -> Piece:
    """Harder forms: most the detectors deliberately do not read (no separators, a password in a sentence,
    a non-ASCII mailbox, a lowercase NINO), labelled all the same; a card followed by its expiry date."""
    d8 = digits(rng, 8)
    options: list[Piece] = [
        [("call me on ", None), (f"06{d8}", "phone"), (" after six", None)],
        [("my cell is ", None), (f"212555{f'01{rng.randint(0, 99):02d}'}", "phone"), (", text first", None)],
        [("my password is ", None), (secret_value(rng), "credential"), (" but I forgot which account", None)],
        [("iban (lowercase, from my notes): ", None), (iban_compact(rng).lower(), "iban"), ("", None)],
        [("card ", None), (group_card(rng, card_digits(rng)).replace("-", " "), "payment_card"), (" 12/29", None)],
        [("écris à ", None), (f"josé.{word(rng)}@{word(rng)}.fr", "email"), (" demain", None)],
        [("NINO lowercase: ", None), (nino(rng).lower(), "national_id"), ("", None)],
    ]
    return rng.choice(options)


# ---- hard negatives: look like the values, are not them -------------------------------------------


def off_by_one(value: str, rng: random.Random) -> str:
    """value with one digit changed (its checksum then fails: Luhn, mod 97 and the 11-test all catch it)."""
    spots = [i for i, ch in enumerate(value) if ch.isdigit()]
    i = rng.choice(spots[-6:])
    return value[:i] + str((int(value[i]) + rng.randint(1, 9)) % 10) + value[i + 1 :]


def checksum_negative(rng: random.Random) -> Piece:
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
    return in_carrier(rng, [(value, None)])


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


def build(pieces: Piece) -> dict[str, object]:
    text, labels = "", []
    for part, detector in pieces:
        if detector is not None:
            labels.append({"detector": detector, "start": len(text), "end": len(text) + len(part)})
        text += part
    return {"text": text, "labels": labels}


DETECTOR_NAMES = tuple(POSITIVES)


def generate(
    seed: int = 29,
    *,
    per_detector: int = 40,
    hard_positives: int = 20,
    negatives: int = 160,
    checksum_negatives: int = 60,
    mixed_lines: int = 30,
) -> list[dict[str, object]]:
    """The labelled set: per_detector positive prompts for each detector, hard positives, hard negatives,
    values failing their check, and prompts mixing several values, shuffled; the same seed gives the same
    lines."""
    rng = random.Random(seed)
    lines = [build(positive(rng, name)) for name in DETECTOR_NAMES for _ in range(per_detector)]
    lines += [build(hard_positive(rng)) for _ in range(hard_positives)]
    lines += [build([(negative(rng), None)]) for _ in range(negatives)]
    lines += [build(checksum_negative(rng)) for _ in range(checksum_negatives)]
    lines += [build(mixed(rng)) for _ in range(mixed_lines)]
    rng.shuffle(lines)
    return lines


def write(lines: list[dict[str, object]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def read(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
