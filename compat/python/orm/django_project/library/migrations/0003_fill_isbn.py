"""A data migration: every book gets an ISBN derived from its key; the
reverse clears them."""

from django.db import migrations
from django.db.models import F, Value
from django.db.models.functions import Concat


def fill(apps, schema_editor):
    Book = apps.get_model("library", "Book")
    Book.objects.filter(isbn__isnull=True).update(isbn=Concat(Value("isbn-"), F("id")))


def clear(apps, schema_editor):
    apps.get_model("library", "Book").objects.update(isbn=None)


class Migration(migrations.Migration):
    dependencies = [("library", "0002_book_isbn")]

    operations = [migrations.RunPython(fill, clear)]
