"""a nullable column on a table the application writes, and an index on it

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("book", sa.Column("isbn", sa.String(20), nullable=True))
    op.create_index("ix_book_isbn", "book", ["isbn"])


def downgrade() -> None:
    op.drop_index("ix_book_isbn", table_name="book")
    op.drop_column("book", "isbn")
