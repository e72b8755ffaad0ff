"""Calibration and validation inputs: bundled photos (seeded augmentations), image folders, texts.

Images go through the runner's own resize/crop/normalise code so calibration and evaluation see
exactly what serving sees.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from inference.runner.config import Preprocessing
from inference.runner.preprocess import ImagePreprocessor

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# Photos shipped inside the installed wheels (no download): the built-in set (calibration, validation,
# tuning) is all of them, colour and greyscale, each in seeded augmented variants. Greyscale photos go
# through the same RGB path as a greyscale upload would.
COLOUR_PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "colorwheel",
    "retina",
    "logo",
    "motorcycle_left",
    "motorcycle_right",
    "china.jpg",
    "flower.jpg",
)
GREY_PHOTOS = ("camera", "coins", "moon", "clock", "brick", "grass", "gravel", "cell", "page")
BUILTIN_PHOTOS = COLOUR_PHOTOS + GREY_PHOTOS
SKIMAGE_PHOTOS = BUILTIN_PHOTOS  # the former name
VALIDATION_VARIANTS = 16
CALIBRATION_VARIANTS = 8
VALIDATION_SEED, CALIBRATION_SEED = 12, 34

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner.",
    "The stock market fell sharply after the central bank raised interest rates.",
    "How do I reset my password if I no longer have access to my email?",
    "Children are playing football in the park on a sunny afternoon.",
    "The new smartphone has a larger battery and a faster processor.",
    "Heavy rain is expected across the region for the rest of the week.",
    "She ordered a cup of coffee and a slice of chocolate cake.",
    "The museum reopened after a two-year renovation of its main hall.",
    "Our flight to Hong Kong was delayed by three hours because of a typhoon.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The committee will publish its final report next Tuesday.",
    "A cat is sleeping on the windowsill in the warm sunlight.",
    "Please send the invoice to the accounting department by Friday.",
    "The recipe calls for two eggs, a cup of flour and some butter.",
    "Researchers discovered a new species of frog in the rainforest.",
    "The train leaves the station at half past seven every morning.",
    "He spent the weekend repairing the old wooden fence behind the house.",
    "Machine learning models can be compressed by quantizing their weights.",
    "The orchestra performed Beethoven's ninth symphony to a packed audience.",
    "Can you recommend a good restaurant near the harbour?",
    "The patient was advised to rest and drink plenty of fluids.",
    "Electric cars are becoming cheaper as battery prices fall.",
    "The library offers free language classes for adults on weekends.",
    "A group of hikers reached the summit just before sunset.",
    "The software update fixed a bug that caused the app to crash on startup.",
    "Tea is grown on the steep hillsides of the island.",
    "The goalkeeper saved a penalty in the final minute of the match.",
    "I would like to cancel my subscription and get a refund.",
    "The city council approved a plan to build more bicycle lanes.",
    "Two dogs are running along the beach chasing a ball.",
    "The ancient temple was carved out of a single block of stone.",
    "Our team shipped the new feature two weeks ahead of schedule.",
    "The bakery on the corner sells the best croissants in town.",
    "Scientists warn that sea levels could rise faster than predicted.",
    "The lecture covered the history of the Silk Road trade routes.",
    "My laptop battery drains quickly when I watch videos.",
    "The ferry crosses the harbour every ten minutes during rush hour.",
    "A woman is slicing vegetables in a busy restaurant kitchen.",
    "The contract must be signed by both parties before work can begin.",
    "Volcanic eruptions can affect the climate for several years.",
    "The band announced a world tour starting in September.",
    "What is the difference between a virus and a bacterium?",
    "The garden is full of roses, tulips and sunflowers in the summer.",
    "Prices at the supermarket have gone up again this month.",
    "The astronaut floated inside the space station, waving at the camera.",
    "He learned to play chess from his grandfather when he was six.",
    "The hotel room had a beautiful view of the mountains.",
    "Traffic was light on the motorway early on Sunday morning.",
    "The judge postponed the trial until new evidence could be reviewed.",
    "Fresh fish is delivered to the market before dawn.",
    "The startup raised ten million dollars in its first funding round.",
    "A child is building a sandcastle with a red plastic bucket.",
    "The printer on the third floor is out of paper again.",
    "Regular exercise improves both physical and mental health.",
    "The documentary follows a family of elephants across the savanna.",
    "Where can I find the nearest pharmacy that is open late?",
    "The bridge was closed for repairs after the earthquake.",
    "Students are preparing for their final exams in the library.",
    "The chef added a pinch of salt and a squeeze of lemon juice.",
    "Wind turbines generate electricity without burning fossil fuels.",
    "The old lighthouse has guided ships safely into port for a century.",
    "Thank you for your help, the problem is solved now.",
    "The painting was sold at auction for a record price.",
)


@dataclass
class ImageSet:
    """Images with an id each (file name or ``photo#variant``) and a label when the set has them."""

    name: str
    images: list[Image.Image]
    ids: list[str]
    labels: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.labels:
            self.labels = [None] * len(self.images)

    @property
    def labelled(self) -> bool:
        return any(label is not None for label in self.labels)

    def describe(self) -> dict[str, Any]:
        classes = sorted({label for label in self.labels if label is not None})
        return {
            "name": self.name,
            "count": len(self.images),
            "labelled": self.labelled,
            "classes": len(classes),
        }


@dataclass
class TextSet:
    name: str
    texts: list[str]
    ids: list[str]
    labels: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.labels:
            self.labels = [None] * len(self.texts)

    @property
    def labelled(self) -> bool:
        return any(label is not None for label in self.labels)

    def describe(self) -> dict[str, Any]:
        classes = sorted({label for label in self.labels if label is not None})
        return {
            "name": self.name,
            "count": len(self.texts),
            "labelled": self.labelled,
            "classes": len(classes),
        }


def _skimage(name: str) -> Image.Image:
    import skimage.data

    if name.startswith("motorcycle_"):
        left, right, _ = skimage.data.stereo_motorcycle()  # type: ignore[no-untyped-call]
        return _rgb(left if name.endswith("left") else right)
    return _rgb(getattr(skimage.data, name)())


def _sklearn(name: str) -> Image.Image:
    from sklearn.datasets import load_sample_image

    return _rgb(load_sample_image(name))


def photos(names: tuple[str, ...]) -> list[tuple[str, Image.Image]]:
    """Named photos from the installed packages (scikit-learn's are skipped when it is not installed)."""
    found = []
    for name in names:
        if name.endswith(".jpg"):
            try:
                found.append((name.removesuffix(".jpg"), _sklearn(name)))
            except ImportError:
                continue
        else:
            found.append((name, _skimage(name)))
    return found


def skimage_photos() -> list[Image.Image]:
    """The photos of the built-in set (scikit-learn's two are skipped when it is not installed)."""
    return [image for _, image in photos(BUILTIN_PHOTOS)]


def _rgb(array: np.ndarray) -> Image.Image:
    array = np.asarray(array)
    if array.dtype == np.bool_:
        array = array.astype(np.uint8) * 255
    return Image.fromarray(np.asarray(array, dtype=np.uint8)).convert("RGB")


def augment(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    """One random variant: crop, flip, rotation, colour jitter, blur and JPEG re-encoding (each maybe)."""
    width, height = image.size
    scale = rng.uniform(0.45, 1.0)
    aspect = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
    w = min(width, max(16, int(width * scale * np.sqrt(aspect))))
    h = min(height, max(16, int(height * scale / np.sqrt(aspect))))
    left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
    image = image.crop((left, top, left + w, top + h))
    if rng.random() < 0.5:
        image = ImageOps.mirror(image)
    if rng.random() < 0.1:
        image = ImageOps.flip(image)
    if rng.random() < 0.5:
        angle = float(rng.uniform(-25, 25))
        image = image.rotate(angle, resample=Image.Resampling.BILINEAR, expand=bool(rng.random() < 0.5))
    image = ImageEnhance.Brightness(image).enhance(float(rng.uniform(0.65, 1.35)))
    image = ImageEnhance.Contrast(image).enhance(float(rng.uniform(0.7, 1.3)))
    image = ImageEnhance.Color(image).enhance(float(rng.uniform(0.6, 1.4)))
    if rng.random() < 0.2:
        image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 1.5))))
    if rng.random() < 0.6:
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=int(rng.integers(30, 95)))
        image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    return image


@functools.lru_cache(maxsize=4)
def augmented_set(name: str, names: tuple[str, ...], variants: int, seed: int) -> ImageSet:
    """Each photo as is plus ``variants - 1`` seeded random variants (the same images on every machine).

    Cached: a tuning run calibrates and evaluates many times in one process (callers never modify it).
    """
    images, ids = [], []
    for index, (photo, image) in enumerate(photos(names)):
        rng = np.random.default_rng([seed, index])
        images.append(image)
        ids.append(f"{photo}#0")
        for variant in range(1, variants):
            images.append(augment(image, rng))
            ids.append(f"{photo}#{variant}")
    return ImageSet(
        f"{name} ({len({i.split('#')[0] for i in ids})} photos x {variants} variants)", images, ids
    )


def builtin_validation() -> ImageSet:
    """The built-in validation set: every packaged photo, each as is plus 15 seeded variants."""
    return augmented_set("built-in photos", BUILTIN_PHOTOS, VALIDATION_VARIANTS, VALIDATION_SEED)


def validation_images() -> list[Image.Image]:
    """The built-in validation images (see ``builtin_validation``)."""
    return builtin_validation().images


def load_image_folder(path: Path, limit: int | None = None) -> ImageSet:
    """Images under ``path``: ``<dir>/<label>/<file>`` gives labels (folder names), a flat folder none.

    Files are read in sorted order; ``limit`` keeps the first ones. Unreadable images raise ValueError.
    """
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    files = files[:limit] if limit is not None else files
    images, ids, labels = [], [], []
    for file in files:
        relative = file.relative_to(root)
        try:
            with Image.open(file) as opened:
                images.append(opened.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read image {relative}: {exc}") from None
        ids.append(relative.as_posix())
        labels.append(relative.parts[0] if len(relative.parts) > 1 else None)
    if not images:
        raise ValueError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in the dataset folder")
    return ImageSet(f"folder {root.name} ({len(images)} images)", images, ids, labels)


def calibration_set(folder: Path | None = None, limit: int = 64) -> ImageSet:
    """Calibration images from ``folder``, or the built-in photos in calibration-only seeded variants."""
    if folder is not None:
        return load_image_folder(folder, limit)
    found = augmented_set("built-in calibration", BUILTIN_PHOTOS, CALIBRATION_VARIANTS, CALIBRATION_SEED)
    # interleave photos so a small limit still covers every photo
    order = sorted(range(len(found.images)), key=lambda i: (int(found.ids[i].split("#")[1]), i))[:limit]
    return ImageSet(found.name, [found.images[i] for i in order], [found.ids[i] for i in order])


def calibration_images(folder: Path | None = None, limit: int = 64) -> list[Image.Image]:
    """Images from ``folder`` (jpg/png/webp), or bundled photos in calibration-only variants."""
    return calibration_set(folder, limit).images


def image_arrays(images: list[Image.Image], preprocessing: dict[str, Any]) -> np.ndarray:
    """NCHW float32 exactly as the runner prepares them."""
    prep = Preprocessing(
        input_size=tuple(preprocessing["input_size"]),
        resize_shorter=int(preprocessing["resize_shorter"]),
        mean=tuple(preprocessing["mean"]),
        std=tuple(preprocessing["std"]),
    )
    pre = ImagePreprocessor(prep)
    return np.stack([pre.to_array(pre.resize_crop(image)) for image in images])


def load_text_file(path: Path, limit: int | None = None) -> TextSet:
    """Texts of a JSON Lines file (``{"text": ..., "label": optional}`` per line) or a plain text file
    (one text per non-empty line)."""
    path = Path(path)
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line]
    texts: list[str] = []
    labels: list[str | None] = []
    json_lines = path.suffix.lower() in (".jsonl", ".ndjson")
    for number, line in enumerate(lines, 1):
        if json_lines:
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"line {number} of {path.name} is not JSON") from None
            if not isinstance(item, dict) or not isinstance(item.get("text"), str):
                raise ValueError(f'line {number} of {path.name} has no "text" string')
            label = item.get("label")
            texts.append(item["text"])
            labels.append(None if label is None else str(label))
        else:
            texts.append(line)
            labels.append(None)
        if limit is not None and len(texts) >= limit:
            break
    if not texts:
        raise ValueError(f"{path.name} holds no texts")
    ids = [f"line {i}" for i in range(1, len(texts) + 1)]
    return TextSet(f"file {path.name} ({len(texts)} texts)", texts, ids, labels)


def text_set(path: Path | None = None, limit: int = 256) -> TextSet:
    if path is None:
        texts = list(SENTENCES[:limit])
        return TextSet(
            f"built-in sentences ({len(texts)})", texts, [f"sentence {i}" for i in range(len(texts))]
        )
    return load_text_file(path, limit)


def text_lines(path: Path | None = None, limit: int = 256) -> list[str]:
    """Texts of a file (JSON Lines or one per line), or the built-in sentences."""
    return text_set(path, limit).texts


def batches(arrays: dict[str, np.ndarray], size: int) -> Iterator[dict[str, np.ndarray]]:
    count = next(iter(arrays.values())).shape[0]
    for start in range(0, count, size):
        yield {name: value[start : start + size] for name, value in arrays.items()}


def text_arrays(tokenizer_path: Path, texts: list[str], max_length: int = 128) -> dict[str, np.ndarray]:
    """input_ids/attention_mask/token_type_ids padded to the longest text, as the runner batches them."""
    from inference.runner.preprocess import TextTokenizer

    tokenizer = TextTokenizer(str(tokenizer_path), max_length)
    encoded = tokenizer(texts)
    longest = max(len(item) for item in encoded)
    ids = np.full((len(encoded), longest), tokenizer.pad_id, dtype=np.int64)
    types = np.zeros_like(ids)
    mask = np.zeros_like(ids)
    for row, item in enumerate(encoded):
        ids[row, : len(item)] = item.ids
        types[row, : len(item)] = item.type_ids
        mask[row, : len(item)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
