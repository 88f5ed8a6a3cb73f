"""The Django application of TestDjangoMigrations: the code deployed before
the migrations (tkproj.app_settings, models in libraryclient), used
unchanged while `manage.py migrate` changes the schema under it."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ["DJANGO_SETTINGS_MODULE"] = "tkproj.app_settings"

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from libraryclient.models import Author, Book  # noqa: E402

import workload  # noqa: E402


def unit(rng):
    with transaction.atomic():
        author = Author.objects.create(name="author %d" % rng.randrange(10**9))
        Book.objects.create(title="first book", author=author)
        # An update of an older row, read with its author: a write of a row
        # another transaction (the data migration) may write.
        old = Book.objects.select_related("author").order_by("?").first()
        if old is not None:
            old.title = "title %d" % rng.randrange(10**9)
            old.save(update_fields=["title"])
        Book.objects.filter(author__isnull=False).count()


def on_error():
    # A session the server ended (FATAL) leaves Django's connection unusable;
    # closing it makes the next attempt reconnect.
    connection.close()


if __name__ == "__main__":
    sys.exit(workload.run(unit, on_error))
