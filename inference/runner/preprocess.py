"""Image decoding/normalisation and tokenization. Runs in a small thread pool, off the event loop."""

from __future__ import annotations

import io
import math
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageOps, UnidentifiedImageError
from tokenizers import Tokenizer

from .config import Preprocessing
from .errors import InvalidInput

MAX_PIXELS = 40_000_000
MAX_SIDE = 10_000
ALLOWED_FORMATS = ("JPEG", "PNG", "WEBP")

# Decompression-bomb guard: Pillow refuses anything over twice this at open(); between 1x and 2x
# it only warns, and our own header check below refuses it, so the warning is noise.
Image.MAX_IMAGE_PIXELS = MAX_PIXELS
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


def too_large(max_pixels: int) -> str:
    return f"the image is too large; the limit is {max_pixels:,} pixels and {MAX_SIDE} px per side"


class ImagePreprocessor:
    """Decode, resize the shorter side, centre-crop and normalise to float32 CHW."""

    def __init__(
        self, prep: Preprocessing, dtype: npt.DTypeLike = np.float32, max_pixels: int = MAX_PIXELS
    ) -> None:
        self.max_pixels = max_pixels
        if Image.MAX_IMAGE_PIXELS is not None and max_pixels > Image.MAX_IMAGE_PIXELS:  # above the default
            Image.MAX_IMAGE_PIXELS = max_pixels
        self.height, self.width = prep.input_size
        self.resize_shorter = prep.resize_shorter
        std = np.asarray(prep.std, dtype=np.float32)
        # (x / 255 - mean) / std folded into one multiply-add.
        self._scale = (1.0 / (255.0 * std)).astype(np.float32)
        self._bias = (-np.asarray(prep.mean, dtype=np.float32) / std).astype(np.float32)
        self.dtype = dtype

    def __call__(self, data: bytes) -> np.ndarray:
        image = self.decode(data)
        return self.to_array(self.resize_crop(image))

    def decode(self, data: bytes) -> Image.Image:
        if not data:
            raise InvalidInput("the image is empty (zero bytes)")
        try:
            image: Image.Image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
        except Image.DecompressionBombError:
            raise InvalidInput(too_large(self.max_pixels)) from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
            raise InvalidInput("the body is not a decodable JPEG, PNG or WebP image") from None
        width, height = image.size  # read from the header: nothing decoded yet
        if width * height > self.max_pixels or max(width, height) > MAX_SIDE:
            raise InvalidInput(f"{too_large(self.max_pixels)} (got {width}x{height})")
        if width < 1 or height < 1:
            raise InvalidInput("the image has no pixels")
        if image.format == "JPEG":
            # Let libjpeg decode at 1/2, 1/4 or 1/8 scale when the image is far larger than needed.
            scale = self._scale_for(width, height)
            image.draft("RGB", (math.ceil(width * scale), math.ceil(height * scale)))
        try:
            image.load()
            image = ImageOps.exif_transpose(image) or image
            return image if image.mode == "RGB" else image.convert("RGB")
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            raise InvalidInput("the image is truncated or corrupt") from None

    def _scale_for(self, width: int, height: int) -> float:
        # Shorter side to resize_shorter, but never smaller than the crop in either dimension.
        return max(self.resize_shorter / min(width, height), self.height / height, self.width / width)

    def resize_crop(self, image: Image.Image) -> Image.Image:
        """Resize (bilinear) and centre-crop in one resampling pass via ``box``."""
        width, height = image.size
        scale = self._scale_for(width, height)
        resized_w, resized_h = round(width * scale), round(height * scale)
        left = round((resized_w - self.width) / 2.0)
        top = round((resized_h - self.height) / 2.0)
        box = (left / scale, top / scale, (left + self.width) / scale, (top + self.height) / scale)
        return image.resize((self.width, self.height), Image.Resampling.BILINEAR, box=box)

    def to_array(self, image: Image.Image) -> np.ndarray:
        # Transpose the uint8 pixels (a view), then one multiply and one in-place add straight into the
        # CHW float32 result: a quarter of the memory traffic of converting HWC floats and transposing.
        chw = np.asarray(image).transpose(2, 0, 1)
        out = np.empty(chw.shape, dtype=np.float32)
        np.multiply(chw, self._scale[:, None, None], out=out)
        out += self._bias[:, None, None]
        return out if self.dtype == np.float32 else out.astype(self.dtype)


@dataclass(frozen=True)
class Encoded:
    ids: np.ndarray  # int64 [length]
    type_ids: np.ndarray  # int64 [length]

    def __len__(self) -> int:
        return int(self.ids.shape[0])


class TextTokenizer:
    """A ``tokenizers`` tokenizer loaded once, truncating to max_length and never padding."""

    def __init__(self, path: str, max_length: int) -> None:
        self._tokenizer = Tokenizer.from_file(path)
        padding = self._tokenizer.padding or {}
        self.pad_id = int(padding.get("pad_id", 0))
        self._tokenizer.no_padding()  # the batcher pads each batch to its own longest input
        self._tokenizer.enable_truncation(max_length)

    def __call__(self, texts: list[str]) -> list[Encoded]:
        for text in texts:
            if not text.strip():
                raise InvalidInput("text inputs must not be empty")
        encodings = self._tokenizer.encode_batch(texts)
        return [
            Encoded(np.asarray(e.ids, dtype=np.int64), np.asarray(e.type_ids, dtype=np.int64))
            for e in encodings
        ]
