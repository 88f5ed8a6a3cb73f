"""authors and books: two tables with SERIAL keys, a foreign key with its
index, and a sequence of their own for the books' stock numbers

Revision ID: 0001
Revises:
"""
from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "author",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False),
    )
    op.execute(sa.schema.CreateSequence(sa.Sequence("book_stock_seq", start=1000)))
    op.create_table(
        "book",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("author_id", sa.Integer, sa.ForeignKey("author.id", name="book_author_fk"), nullable=False),
        sa.Column("stock_no", sa.BigInteger, server_default=sa.text("nextval('book_stock_seq')"), nullable=False),
    )
    op.create_index("ix_book_author_id", "book", ["author_id"])
    op.bulk_insert(
        sa.table("author", sa.column("id", sa.Integer), sa.column("name", sa.String)),
        [{"id": -1, "name": "Anonymous"}],
    )


def downgrade() -> None:
    op.drop_index("ix_book_author_id", table_name="book")
    op.drop_table("book")
    op.execute(sa.schema.DropSequence(sa.Sequence("book_stock_seq")))
    op.drop_table("author")
