from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("library", "0001_initial")]

    operations = [
        migrations.AddField(model_name="book", name="isbn", field=models.CharField(max_length=20, null=True)),
        migrations.AddIndex(model_name="book", index=models.Index(fields=["isbn"], name="library_book_isbn_idx")),
    ]
