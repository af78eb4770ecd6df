"""The pinned public RouteLLM outcome logs: where they are published, and fetching them.

Files land in the layout the RouteLLM loader reads (mmlu/, gsm8k/, mt_bench/). They are
downloaded into a staging folder beside the destination and moved into it only when every
one of them is complete (the length the server announced) and matches its pinned SHA-256,
so a failed or interrupted fetch never leaves a folder that looks like logs. `make data`
(pipelines/fetch_data.py) and `make train` on a machine with no logs
(data.location.default_data_paths) both fetch through `fetch`. The base URLs can be pointed
elsewhere (a mirror, or a local server in tests) with ROUTER_ROUTELLM_URL and
ROUTER_FASTCHAT_URL.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from data.routellm import SUBJECT_DOMAIN

ROUTELLM_COMMIT = "0b64fdafe049e596a3f5657c219329f24af24198"
ROUTELLM_URL = f"https://raw.githubusercontent.com/lm-sys/RouteLLM/{ROUTELLM_COMMIT}"
# MT-Bench questions live in FastChat, which RouteLLM's MT-Bench evaluation reads.
FASTCHAT_COMMIT = "589532dcfa83700f950b9aa3983416c543afabc0"
FASTCHAT_URL = f"https://raw.githubusercontent.com/lm-sys/FastChat/{FASTCHAT_COMMIT}"
# SHA-256 of each file (by its path in the plan) at the pinned commits, read from the two
# repositories' git objects at those commits; a download is rejected unless its bytes match.
PINNED_SHA256: Mapping[str, str] = {
    "mmlu/mmlu_abstract_algebra.csv": "67e564eea42e71fbfcaf616972df952c316e5538376da1c16d691177458b96b9",
    "mmlu/mmlu_anatomy.csv": "53ebea8257805eeecc25713728264b8235cffad7b720962a3eafc92fd27ef537",
    "mmlu/mmlu_astronomy.csv": "49915ece9dfe8aadbd351f221ada2ea86b6f832ce49fa64d1622a0f066c19794",
    "mmlu/mmlu_business_ethics.csv": "13a45bed754ffe8f0e7f0348e69085c648a1ae0e91aa76cd5e6906fa45f7ec8e",
    "mmlu/mmlu_clinical_knowledge.csv": "5ea37709bfbad4df7a3fcbd8973413f7645a2adfef9772490f09d3f293ffe882",
    "mmlu/mmlu_college_biology.csv": "c38620db5b9f6f1b0fde7bc8d8299b8e2305c4dacbb1567c904cd51618d627d5",
    "mmlu/mmlu_college_chemistry.csv": "78ca6ba22ff25c8fdb93e1c6e84384e72522106c73ed5ee9fed620928ce395ce",
    "mmlu/mmlu_college_computer_science.csv": "8a7b2a87a36b428c9d1a8f12ce3b01cf7920f0a7146d6f8a111da6749c332da3",
    "mmlu/mmlu_college_mathematics.csv": "3f22f42779c48509c66e21d7d1fc3054eb0256c1b5b772bb6d9a3af1b253238b",
    "mmlu/mmlu_college_medicine.csv": "63d71d29e630fc6538e1705a51f4267bdbbdea0fa7ee85056ad7d6f8f10d3987",
    "mmlu/mmlu_college_physics.csv": "8162a0660d4ef7b963088e0a176d4b8630096127a0d0b5ed003f649cbad34455",
    "mmlu/mmlu_computer_security.csv": "26446faf7460f03aa2d82a05c170faedb5cbf6d7bdda133b1146229107097d1c",
    "mmlu/mmlu_conceptual_physics.csv": "ea40473704b64cb60d564ffe91962848ec6fc3106b40089d08cebc98d5c7226d",
    "mmlu/mmlu_econometrics.csv": "927b4d877cec8697f3b8378bb7e7c7a279babaea2edacf350ea50908701907b9",
    "mmlu/mmlu_electrical_engineering.csv": "de2fb7c2e9addb4808f5b3f7c79efbfdfb86216235bb7dc28ab70bc53664f11e",
    "mmlu/mmlu_elementary_mathematics.csv": "88697ff0d238b5852c7a959379dc8b0b45c3554ed4b2ee7cbb7ffc34e06c7cf5",
    "mmlu/mmlu_formal_logic.csv": "094a462626468569ad595c03e66e73a299188cfa175248b499dba94e005506e6",
    "mmlu/mmlu_global_facts.csv": "6f75ddf7d6eb94ac0471529a85ff7f8b738c9f4055185b3114eed26393222d06",
    "mmlu/mmlu_high_school_biology.csv": "444982fc2c750ab8cbc6942a0c0267040aa5023c1d2364247d20e2a28b4e325d",
    "mmlu/mmlu_high_school_chemistry.csv": "ae5e62479365dcd056354c568f60da65b1df9f1de57dda3953a8e9933a6f12e4",
    "mmlu/mmlu_high_school_computer_science.csv": "d156d9448a6e899f7f976a0afac148a928bf709a2baa573f0c407854a25bdb11",
    "mmlu/mmlu_high_school_european_history.csv": "c64afd6c5e30ef0cd5c10beab961ac05e7ba55d6b48cd93bf6ad0a45f90515bf",
    "mmlu/mmlu_high_school_geography.csv": "21b12044be4a6b9813880ad46372006dc0846e7f85fa46883bb73dbd90fba30a",
    "mmlu/mmlu_high_school_government_and_politics.csv": "2791689acc61775a5857f4f3a5fd248d30552553c3a96f6ee63dc28285437259",
    "mmlu/mmlu_high_school_macroeconomics.csv": "73b931a2a06ba74a5c9f1e005d45a25004e36be5d075d98f8ebcf89b3fda367b",
    "mmlu/mmlu_high_school_mathematics.csv": "151b2a736981b7b20f3bad99de6a573e4692d68cf87020e943b601b70bb37390",
    "mmlu/mmlu_high_school_microeconomics.csv": "f7ea151efb4c9d96374db3358ac7e97e4d8349e26715f61dac98bc9d854ca046",
    "mmlu/mmlu_high_school_physics.csv": "1e2103fc8f7f1cfac7c00952b26db2418acab092486af78a9c51c551ae2ff9be",
    "mmlu/mmlu_high_school_psychology.csv": "d11604f2c7a2425258d5b9a285ef71737c011cc3a91456890f088a0ee4c55212",
    "mmlu/mmlu_high_school_statistics.csv": "de6642bcd93d7a80e7bbd73d987a44d67b6e537b47749ddc518122fd582703bb",
    "mmlu/mmlu_high_school_us_history.csv": "a71186d143363e203b2f216d78c9d21f10cca51de455ef176c9c01b77f546592",
    "mmlu/mmlu_high_school_world_history.csv": "e9c52305977dc37b3e48eee727ad933b2d24d96ca3a06aec865a8900b1e87d2c",
    "mmlu/mmlu_human_aging.csv": "0d6c4109b4f61f138781ce50bbc60ff2e90dd451694d3926a088be5a5bd88aa8",
    "mmlu/mmlu_human_sexuality.csv": "20916037e3012731883f926738daf47ed994f74ba25518fdb7f0df72a81143fd",
    "mmlu/mmlu_international_law.csv": "e389b886e3e1570bfdf798f6f56dc3c675350200c5baf0f41a0766294ff312eb",
    "mmlu/mmlu_jurisprudence.csv": "7e94c3849231be7b2654db11e44ee51531f8474e300fe83b1e05438df3038f0b",
    "mmlu/mmlu_logical_fallacies.csv": "fa2d94cd2e901621aaebd0a7e64560b5dbbe4249086795398533eed2561c0c1e",
    "mmlu/mmlu_machine_learning.csv": "9301e928481be6e20b3541e1ac112b25a4a71338b21592978c0d219cb6240020",
    "mmlu/mmlu_management.csv": "a00b12ab0265918f9335a85ce02303ddaea0491a7b099f88a05986eeac4aa4fb",
    "mmlu/mmlu_marketing.csv": "3ee0b6560ebe0eb4f14ce63227d6f6ec8cb8b6e57e345eae9460be742672f36c",
    "mmlu/mmlu_medical_genetics.csv": "7c830f87dcbc0029137b3400cf361931831cb57dda55717a64e72ad74663d5df",
    "mmlu/mmlu_miscellaneous.csv": "c2e1a5b0394a8429f55b6340e1865166ac17ec6b3571523005e413b3b2843b9f",
    "mmlu/mmlu_moral_disputes.csv": "8b2b973b1987b724f39fd10970604d7f1150747a0db9ce766c193bd978c9d0c4",
    "mmlu/mmlu_moral_scenarios.csv": "78ded6fdca1cd0d5c4ed16a5ed4aebf2e98401b9c00b20e565e6cce5bf1153c7",
    "mmlu/mmlu_nutrition.csv": "ba197fbf4b6c5034414d66ea7747211056cf5f709f83d919d2d856245720cc51",
    "mmlu/mmlu_philosophy.csv": "2f30ad01ab529ddea00dff4ff87e950fef838a78754c94f6884120628a7d0591",
    "mmlu/mmlu_prehistory.csv": "afc816d4b78814627bae9b8c3730a9bb72bd958ff6259fd36c981777cfe83753",
    "mmlu/mmlu_professional_accounting.csv": "fe5ee976a625832ecf624086103619523d063a3a728c60681b6a53c55b638a37",
    "mmlu/mmlu_professional_law.csv": "60a4308df4f481ff8840590b29061835207b50a9f06a9fc68baf12b114f7e2e0",
    "mmlu/mmlu_professional_medicine.csv": "6fda30b523e4e2ce8b1f18e871a0722190a4ac81ec377a75fbba4a63e0b510f7",
    "mmlu/mmlu_professional_psychology.csv": "bfb3a7fb653e2b195d3fa258894af64d3f1c3dbd4059c1e0feb728131d20f9b3",
    "mmlu/mmlu_public_relations.csv": "2196279ea2535fbda62509c3156209b764459a3d515a9ba84b69cf16bb4c27d0",
    "mmlu/mmlu_security_studies.csv": "1354bb17649f95b7dd8ef3179e22329abe6bef84e639d63370ae9e80b2509905",
    "mmlu/mmlu_sociology.csv": "903ba6259b13f2877607abef22b7b19cb575104268d4ced615e3129d3caafb47",
    "mmlu/mmlu_us_foreign_policy.csv": "f1c1d266753a3f161e2018c16c6948fb78c7f5e506a10b4fc0441049962a6c69",
    "mmlu/mmlu_virology.csv": "d525f1ba88982befd42140e73822fe940e73db82bbdcdd569d95f26c3dd41e68",
    "mmlu/mmlu_world_religions.csv": "49dc00d44e069ecaac6a7f7e2188f4a8bce5df56ee91bb15f55519d07f64af8e",
    "gsm8k/gsm8k_responses.csv": "1f38ed03db354a020f71e92022383dc3cf37bbf2694dea4daaeea7b6c43fe57b",
    "mt_bench/judgements.jsonl": "ffd1d44e7af835c810d35ebd420b88a47acd8aac850f46b149b9889964ae4478",
    "mt_bench/question.jsonl": "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
    "LICENSE": "43070e2d4e532684de521b885f385d0841030efa2b1a20bafb76133a5e1379c1",
}
# A JSON file {path: sha256} that replaces the pins, for a mirror that deliberately serves other
# bytes (a redacted or cut copy of the logs); the default is the pins above.
CHECKSUMS_ENV = "ROUTER_LOGS_SHA256"


class DownloadError(RuntimeError):
    """A file could not be fetched; the message says which and what to do instead."""


def routellm_url() -> str:
    """The RouteLLM base URL: ROUTER_ROUTELLM_URL, else the pinned commit on GitHub."""
    return os.environ.get("ROUTER_ROUTELLM_URL") or ROUTELLM_URL


def fastchat_url() -> str:
    """The FastChat base URL (MT-Bench questions): ROUTER_FASTCHAT_URL, else the pinned commit."""
    return os.environ.get("ROUTER_FASTCHAT_URL") or FASTCHAT_URL


def pinned_checksums() -> Mapping[str, str]:
    """The digests downloads must match: PINNED_SHA256, or the JSON file named by ROUTER_LOGS_SHA256."""
    path = os.environ.get(CHECKSUMS_ENV)
    if not path:
        return PINNED_SHA256
    try:
        digests = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DownloadError(f"{CHECKSUMS_ENV}={path}: cannot read it as JSON ({exc})") from None
    if not isinstance(digests, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for k, v in digests.items()
    ):
        raise DownloadError(f"{CHECKSUMS_ENV}={path}: must be a JSON object of file path -> 64 hex digit SHA-256")
    return digests


def file_plan(routellm_url: str = ROUTELLM_URL, fastchat_url: str = FASTCHAT_URL) -> list[tuple[str, str]]:
    """(destination relative path, source URL) for every file of the public logs."""
    evals = f"{routellm_url}/routellm/evals"
    plan = [(f"mmlu/mmlu_{s}.csv", f"{evals}/mmlu/responses/mmlu_{s}.csv") for s in sorted(SUBJECT_DOMAIN)]
    plan += [
        ("gsm8k/gsm8k_responses.csv", f"{evals}/gsm8k/gsm8k_responses.csv"),
        ("mt_bench/judgements.jsonl", f"{evals}/mt_bench/judgements.jsonl"),
        ("mt_bench/question.jsonl", f"{fastchat_url}/fastchat/llm_judge/data/mt_bench/question.jsonl"),
        ("LICENSE", f"{routellm_url}/LICENSE"),
    ]
    return plan


def download(url: str, target: Path, *, sha256: str | None = None, timeout: float = 30.0) -> None:
    """Fetch one URL to `target`, checking that all the bytes the server announced arrived
    (urllib returns a connection closed early as a short file) and, when given, their SHA-256.
    A failed download leaves no file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(target, "wb") as out:
            announced = response.headers.get("Content-Length")
            while chunk := response.read(1 << 16):
                digest.update(chunk)
                out.write(chunk)
            received = out.tell()
        if announced is not None and received != int(announced):
            raise DownloadError(
                f"could not download {url}: incomplete: {received} of {announced} bytes arrived. "
                "Run the command again; if it keeps failing, the server or a proxy cuts the transfer."
            )
        if sha256 is not None and digest.hexdigest() != sha256:
            raise DownloadError(
                f"{url} (saved as {target.name}) has SHA-256 {digest.hexdigest()}, not the pinned "
                f"{sha256}: the server does not hold the pinned files (a changed mirror, or a proxy "
                "that rewrites them). Use the default URL or a faithful mirror; for a mirror that serves other bytes on "
                f"purpose, name their digests in {CHECKSUMS_ENV}."
            )
    except (urllib.error.URLError, OSError) as exc:
        target.unlink(missing_ok=True)
        raise DownloadError(
            f"could not download {url}: {exc}. If this machine is offline, copy a RouteLLM data "
            "folder to it by hand and set ROUTER_DATA_DIR to that folder."
        ) from exc
    except DownloadError:
        target.unlink(missing_ok=True)
        raise


def fetch(
    dest: Path,
    *,
    routellm_url: str = ROUTELLM_URL,
    fastchat_url: str = FASTCHAT_URL,
    force: bool = False,
    checksums: Mapping[str, str] | None = None,
    progress: Callable[[], None] | None = None,
) -> list[Path]:
    """Download every planned file that is missing from `dest` (all of them with force) and
    return where they were written. Files arrive in `dest`.part and move into `dest` only
    when all of them are complete and verified (`checksums`: pinned_checksums() unless given); on
    any failure `dest` stays as it was and the staging folder is removed."""
    if checksums is None:
        checksums = pinned_checksums()
    staging = dest.with_name(dest.name + ".part")
    shutil.rmtree(staging, ignore_errors=True)  # what an interrupted fetch left
    wanted = []
    try:
        for relative, url in file_plan(routellm_url, fastchat_url):
            if force or not (dest / relative).exists():
                download(url, staging / relative, sha256=checksums.get(relative))
                wanted.append(relative)
            if progress:
                progress()
        install(staging, dest, wanted)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [dest / relative for relative in wanted]


def install(staging: Path, dest: Path, files: list[str]) -> None:
    """Move the verified files from `staging` into `dest`: the whole folder in one rename when
    `dest` does not exist yet (the logs appear complete or not at all), file by file otherwise."""
    if not files:
        return
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging.rename(dest)
        return
    for relative in files:
        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
        (staging / relative).replace(dest / relative)
