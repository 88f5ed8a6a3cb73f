"""a data migration: every book gets an ISBN derived from its key

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

book = sa.table("book", sa.column("id", sa.Integer), sa.column("isbn", sa.String))


def upgrade() -> None:
    op.execute(book.update().where(book.c.isbn.is_(None)).values(isbn=sa.func.concat("isbn-", book.c.id)))


def downgrade() -> None:
    op.execute(book.update().values(isbn=None))
