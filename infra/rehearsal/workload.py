"""The photos the load rehearsal uploads: small phone-sized JPEGs with one or two faces
(every third of the opted-out subject) and one 150-face group photo for the burst, and
one-face photos for the everyday cost. The counts per photo
do not depend on the pixels, so the photos are small."""

import io
import os
import random
import time

from rehearse import SHARED

SUBJECT, STRANGER = "grace_hopper.jpg", "astronaut.png"
GROUP_FACES = 150


def background(rng):
    """A 640×480 canvas of one colour with six random rectangles: every photo a distinct
    file."""
    from PIL import Image, ImageDraw
    canvas = Image.new("RGB", (640, 480), tuple(rng.randrange(40, 220) for _ in range(3)))
    draw = ImageDraw.Draw(canvas)
    for _ in range(6):
        x, y = rng.randrange(640), rng.randrange(480)
        draw.rectangle((x, y, x + rng.randrange(10, 80), y + rng.randrange(10, 80)),
                       fill=tuple(rng.randrange(256) for _ in range(3)))
    return canvas


def portraits():
    """The subject's and the stranger's portraits (public domain, `../shared/testdata/faces`)."""
    from PIL import Image
    return {name: Image.open(os.path.join(SHARED, "testdata/faces", name)).convert("RGB") for name in (SUBJECT, STRANGER)}


def jpeg(image):
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def phone_photos(n, seed=23):
    """`n` distinct 640×480 JPEGs, each with one or two faces: (name, bytes, has subject).
    Every third holds the opted-out subject; one, a third of the way in, is the 150-face
    group photo."""
    rng = random.Random(seed)
    faces = portraits()
    out = []
    for i in range(n):
        if i == n // 3:
            out.append((f"group-{i:05}.jpg", group_photo(faces, rng), False))
            continue
        canvas = background(rng)
        people = [SUBJECT] if i % 3 == 0 else [STRANGER]
        if i % 5 == 1:
            people.append(STRANGER if people[0] == SUBJECT else SUBJECT)
        slots = [(20, 60), (340, 60)]
        for person, (x, y) in zip(people, slots):
            face = faces[person]
            h = rng.randrange(230, 300)
            canvas.paste(face.resize((int(face.width * h / face.height), h)), (x + rng.randrange(0, 20), y))
        out.append((f"burst-{i:05}.jpg", jpeg(canvas), SUBJECT in people))
    return out


def one_face_photos(n, seed=29):
    """`n` distinct 640×480 JPEGs with exactly one face each, every third of the opted-out
    subject: what a paying user's everyday upload costs (`load.py`'s `one_face` phase)."""
    rng = random.Random(seed)
    faces = portraits()
    out = []
    for i in range(n):
        canvas = background(rng)
        person = SUBJECT if i % 3 == 0 else STRANGER
        face = faces[person]
        h = rng.randrange(230, 300)
        canvas.paste(face.resize((int(face.width * h / face.height), h)), (rng.randrange(20, 300), 60))
        out.append((f"one-face-{i:05}.jpg", jpeg(canvas), person == SUBJECT))
    return out


def group_photo(faces, rng):
    """A crowd: 150 faces on a 15 × 10 grid, 160 px each (strangers: the subject is not
    in it, so no face of it may be decided `subject`)."""
    from PIL import Image
    face = faces[STRANGER]
    tile = face.resize((160, 160))
    canvas = Image.new("RGB", (15 * 160, 10 * 160), (90, 90, 90))
    for k in range(GROUP_FACES):
        canvas.paste(tile, ((k % 15) * 160, (k // 15) * 160))
    return jpeg(canvas)


def no_face_photo(seed=31):
    """A 640×480 JPEG with no face: the wide sweep's photo."""
    return jpeg(background(random.Random(seed)))


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid():
    """A new ULID (48 bits of milliseconds, 80 random), as Tessera's ids are written."""
    n = (int(time.time() * 1000) << 80) | random.getrandbits(80)
    return "".join(_CROCKFORD[(n >> (5 * k)) & 31] for k in reversed(range(26)))
