"""`nanochat-bench data download --eval-bundle`: stage upstream's eval_bundle.zip as $NANOCHAT_BASE_DIR/eval_bundle
before any evaluation (compute nodes usually have no internet; upstream fetches it at evaluation time).

Through the shard downloader's machinery (bench/nanochat/download.py): one probe first, so a mirror that cannot
be reached stops the command in seconds with one line; then the zip streams to eval_bundle.zip.tmp, which a
later try (or a later run of the command) resumes with a Range request. The finished zip is checked: its
SHA-256 against --sha256 when given (upstream publishes none, so the digest seen is recorded in origin.json),
every member's CRC, and the bundle it holds (core.yaml, the baselines, every task's file, every row) before it
is moved into place. A bundle already staged that reads is not fetched again.
"""

import hashlib
import os
import zipfile
from pathlib import Path

from tqdm import tqdm

from bench.contract import write_json_atomic
from bench.errors import ConfigError, DataError, os_reason_and_remedy
from bench.nanochat import download
from bench.nanochat.common import ELSEWHERE, get_base_dir
from bench.nanochat.evalbundle import BUNDLE_DIR, DATA_DIR, EVAL_BUNDLE_URL, ORIGIN, bundle_dir, load_bundle, \
    replaced_whole

ENV_URL = "NANOCHAT_EVAL_BUNDLE_URL"
ZIP_NAME = "eval_bundle.zip"
FIX_URL = f"check the network, or point --url (or {ENV_URL}) at a mirror of {EVAL_BUNDLE_URL}"


def check_all_rows(bundle) -> int:
    """Read every task's rows (a corrupt line is a DataError naming it); the number of examples."""
    return sum(len(bundle.task_data(t)) for t in bundle.tasks)


def fetch_zip(url: str, dest: Path, retries: int, timeout_s: float, backoff_s: float = 2.0,
              chunk_bytes: int = download.CHUNK_BYTES) -> None:
    """The zip into dest, through dest.tmp, resumed across tries and runs, its bytes counted on a bar at a terminal
    (162 MB take minutes on a slow link; a job's log gets no bar); DataError after the last try."""
    tmp = dest.with_name(dest.name + ".tmp")  # a fixed name: a later try resumes it
    timeout = download.timeouts(timeout_s)
    with tqdm(unit="B", unit_scale=True, unit_divisor=1024, desc=dest.name, leave=False, disable=None) as bar:
        try:
            download.retrying(url, lambda: download._fetch_once(url, tmp, timeout, chunk_bytes, bar), retries,
                              backoff_s, f"run again to resume {tmp}; {FIX_URL}",
                              then_refused=f"running again changes nothing; check the URL, or point --url "
                                           f"(or {ENV_URL}) at a mirror of {EVAL_BUNDLE_URL}")
            os.replace(tmp, dest)
        except OSError as e:
            raise DataError(f"cannot write {tmp}: {os_reason_and_remedy(e, ELSEWHERE)}, then run again to resume"
                            ) from None


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def place(zip_path: Path, target: Path, origin: dict) -> int:
    """Unpack the zip's eval_bundle/ folder, check it whole, then move it to `target`; its examples. A zip that
    fails a check is deleted: kept, every later run would unpack it again rather than fetch one (from any --url)."""
    try:
        with zipfile.ZipFile(zip_path) as z:
            bad = z.testzip()
            if bad is not None:
                raise DataError(f"{zip_path}: member {bad} fails its CRC check (a damaged download)")
            with replaced_whole(target) as unpacked:
                z.extractall(unpacked.parent)
                if not unpacked.is_dir():
                    raise DataError(f"{zip_path}: no top-level {BUNDLE_DIR}/ folder in the zip; is it upstream's "
                                    f"eval_bundle.zip?")
                examples = check_all_rows(load_bundle(unpacked))
                write_json_atomic(unpacked / ORIGIN, origin)
    except (zipfile.BadZipFile, DataError) as e:
        zip_path.unlink()
        what = f"{zip_path}: not a zip file ({e})" if isinstance(e, zipfile.BadZipFile) else str(e)
        raise DataError(f"{what}; deleted {zip_path.name} (from {origin['url']}), run again to fetch it anew") from None
    except OSError as e:  # our side (a full disk, a quota): the zip is whole, so it is kept for the next run
        raise DataError(f"cannot unpack {zip_path} into {target.parent}: {os_reason_and_remedy(e, ELSEWHERE)} "
                        "(the zip is kept: run again there and it is unpacked, not fetched again)") from None
    return examples


def stage(url: str | None = None, sha256: str | None = None, retries: int = 5,
          timeout_s: float = download.READ_TIMEOUT_S, overwrite: bool = False, backoff_s: float = 2.0,
          chunk_bytes: int = download.CHUNK_BYTES) -> tuple[Path, int, bool]:
    """(bundle directory, examples, fetched now?)."""
    download.check_tries(retries, timeout_s)
    if sha256 is not None and (len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256.lower())):
        raise ConfigError(f"--sha256 {sha256}: must be 64 hexadecimal digits")
    # one staging into a base directory at a time, as the other downloads: two at once resumed each other's
    # half-written eval_bundle.zip.tmp, mixing their bytes; the second waits, then finds the bundle staged
    with download.one_download_at_a_time(get_base_dir()):
        target = bundle_dir()
        if target.exists():
            origin = load_bundle_or_none(target)
            if origin == "generated" and not overwrite:
                raise DataError(f"{target}: a `data generate --eval-bundle` stand-in is staged there; pass "
                                "--overwrite to replace it by the real bundle (default: refuse to mix them)")
            if origin not in (None, "generated"):
                return target, check_all_rows(load_bundle(target)), False
        url = url or os.environ.get(ENV_URL) or EVAL_BUNDLE_URL
        zip_path = get_base_dir() / ZIP_NAME
        if not zip_path.is_file():
            download.check_reachable(url, download.timeouts(timeout_s),
                                     f"nothing was downloaded; {FIX_URL}")
            fetch_zip(url, zip_path, retries, timeout_s, backoff_s, chunk_bytes)
        digest = sha256_of(zip_path)
        if sha256 is not None and digest != sha256.lower():
            zip_path.unlink()
            raise DataError(f"{url}: the zip's SHA-256 is {digest}, not the --sha256 {sha256.lower()} given; "
                            "deleted it; check the mirror")
        examples = place(zip_path, target, {"origin": "downloaded", "url": url, "sha256": digest,
                                            "bytes": zip_path.stat().st_size})
        zip_path.unlink()  # unpacked and checked: the 162 MB are not needed twice
        return target, examples, True


def load_bundle_or_none(target: Path) -> str | None:
    """The origin of a staged bundle that reads whole ("generated", "downloaded", "unknown"); None if it does not."""
    try:
        bundle = load_bundle(target)
        check_all_rows(bundle)
    except DataError:
        return None
    return bundle.origin().get("origin", "unknown")


def cli_download(args) -> int:
    """`data download --eval-bundle` (bench/commands/data.py hands over here)."""
    path, examples, fetched = stage(url=args.url, sha256=args.sha256, retries=args.retries, timeout_s=args.timeout,
                                    overwrite=args.overwrite)
    verb = "staged" if fetched else "already staged (checked, not fetched again)"
    tasks = len(load_bundle(path).tasks)
    print(f"eval bundle {verb}: {path} ({tasks} tasks, {examples:,} examples under {DATA_DIR}/); nodes read it "
          f"offline")
    return 0


def cli_generate(args) -> int:
    """`data generate --eval-bundle`: a small bundle in the real format (offline; scores mean nothing)."""
    from bench.nanochat import evalgen

    path = evalgen.generate(overwrite=args.overwrite)
    bundle = load_bundle(path)
    print(f"generated eval bundle {path}: {len(bundle.tasks)} tasks, {check_all_rows(bundle):,} examples "
          f"(an offline stand-in: its CORE measures nothing)")
    return 0
