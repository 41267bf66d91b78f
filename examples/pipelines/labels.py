"""Product-label images for the OCR example: a few lines of text, mixed sizes, on a light
background, rendered with PIL and DejaVu Sans (Debian's fonts-dejavu-core; SAMPAN_LABEL_FONT
names another copy). Used by
tests/server/test_pipelines.py, bench/pipelines/ocr_bench.py and as client input."""
import io
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFont

FONT = os.environ.get("SAMPAN_LABEL_FONT", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")

LINES = [
    ["Organic Green Tea", "Net weight 500 g", "Best before 2027-03-14"],
    ["SAMPAN COFFEE", "Dark roast", "Whole beans 1 kg", "Store cool and dry", "Lot 88-4021"],
    ["Price 12.99 EUR", "Made in Portugal", "Olive oil", "Cold pressed", "750 ml", "Batch A17", "Exp 11/2028"],
    ["Oat Milk", "No added sugar", "1 L", "Shake well"],
]


def label(lines, seed, rotate180=False):
    """One label: the lines at random sizes (22-39 px) and indents; turned upside down if asked."""
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(22, 40, len(lines))]
    h = 30 + sum(int(s * 1.9) for s in sizes)
    img = Image.new("RGB", (680, h), (250, 248, 240))
    d = ImageDraw.Draw(img)
    y = 18
    for text, s in zip(lines, sizes):
        d.text((int(rng.integers(16, 60)), y), text, fill=(20, 20, 30), font=ImageFont.truetype(FONT, s))
        y += int(s * 1.9)
    return img.rotate(180) if rotate180 else img


def encode(img, fmt="PNG"):
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": 92} if fmt == "JPEG" else {}))
    return buf.getvalue()


def label_images():
    """The four labels of LINES encoded (the second as JPEG, the others PNG; the third upside down)."""
    imgs = [label(lines, i, rotate180=(i == 2)) for i, lines in enumerate(LINES)]
    return [encode(im, "JPEG" if i == 1 else "PNG") for i, im in enumerate(imgs)]


if __name__ == "__main__":
    import sys
    for i, data in enumerate(label_images()):
        path = f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/label{i}.{'jpg' if i == 1 else 'png'}"
        with open(path, "wb") as f:
            f.write(data)
        print(path)
