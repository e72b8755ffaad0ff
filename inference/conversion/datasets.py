"""Calibration and validation inputs: bundled photos (augmented) and built-in sentences.

Images go through the runner's own resize/crop/normalise code so calibration and evaluation see
exactly what serving sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from inference.runner.config import Preprocessing
from inference.runner.preprocess import ImagePreprocessor

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
# scikit-image photos shipped inside the wheel (no download); all RGB or RGBA.
SKIMAGE_PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "immunohistochemistry",
    "hubble_deep_field",
    "colorwheel",
    "retina",
    "logo",
)

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


def skimage_photos() -> list[Image.Image]:
    """The RGB photos bundled with scikit-image, plus scikit-learn's two samples when installed."""
    import skimage.data

    photos = [_rgb(getattr(skimage.data, name)()) for name in SKIMAGE_PHOTOS]
    # skimage's lazy-loader stub leaves stereo_motorcycle unannotated
    left, right, _ = skimage.data.stereo_motorcycle()  # type: ignore[no-untyped-call]
    photos += [_rgb(left), _rgb(right)]
    try:
        from sklearn.datasets import load_sample_images
    except ImportError:
        return photos
    return photos + [_rgb(image) for image in load_sample_images().images]


def _rgb(array: np.ndarray) -> Image.Image:
    return Image.fromarray(np.asarray(array, dtype=np.uint8)).convert("RGB")


def _augmentations(image: Image.Image) -> list[Image.Image]:
    width, height = image.size
    crop = (width // 8, height // 8, width - width // 8, height - height // 8)
    return [
        image,
        ImageOps.mirror(image),
        ImageOps.flip(image),
        image.crop(crop),
        image.crop((width // 4, height // 4, width - width // 4, height - height // 4)),
        image.crop((0, 0, width * 3 // 4, height * 3 // 4)),
        ImageEnhance.Brightness(image).enhance(0.7),
        ImageEnhance.Brightness(image).enhance(1.3),
        image.rotate(12, resample=Image.Resampling.BILINEAR),
        image.rotate(-20, resample=Image.Resampling.BILINEAR, expand=True),
    ]


def _calibration_variants(image: Image.Image) -> list[Image.Image]:
    # Different transforms from the validation set so the two overlap only in the base photos.
    width, height = image.size
    return [
        image,
        image.transpose(Image.Transpose.TRANSPOSE),
        image.crop((width // 4, height // 4, width, height)),
        ImageEnhance.Contrast(image).enhance(1.2),
    ]


def validation_images() -> list[Image.Image]:
    """At least 100 images: each bundled photo in ten variants (flips, crops, brightness, rotation)."""
    return [variant for photo in skimage_photos() for variant in _augmentations(photo)]


def calibration_images(folder: Path | None = None, limit: int = 64) -> list[Image.Image]:
    """Images from ``folder`` (jpg/png/webp), or bundled photos in calibration-only variants."""
    if folder is None:
        return [v for photo in skimage_photos() for v in _calibration_variants(photo)][:limit]
    paths = sorted(p for p in Path(folder).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    return [Image.open(p).convert("RGB") for p in paths[:limit]]


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


def text_lines(path: Path | None = None, limit: int = 256) -> list[str]:
    """Non-empty lines of a text file, or the built-in sentences."""
    if path is None:
        return list(SENTENCES[:limit])
    lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line][:limit]


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
