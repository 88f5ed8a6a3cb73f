"""library's models as of its first migration, as the application deployed
before the migrations has them. The tables are library's (managed=False)."""

from django.db import models


class Author(models.Model):
    name = models.CharField(max_length=100)

    class Meta:
        managed = False
        db_table = "library_author"


class Book(models.Model):
    title = models.CharField(max_length=200)
    author = models.ForeignKey(Author, on_delete=models.CASCADE, related_name="books")

    class Meta:
        managed = False
        db_table = "library_book"
