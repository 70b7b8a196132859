"""Observed state per node (``racklife refresh``): the last document seen, with its time.

On main before migrations; a store made then is stamped with this revision.
Revision 0003, after 0002; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_observations',
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('doc', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['node'], ['racklife_nodes.name'], ),
    sa.PrimaryKeyConstraint('node')
    )


def downgrade() -> None:
    op.drop_table('racklife_observations')
